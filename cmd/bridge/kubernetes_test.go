package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8syaml "sigs.k8s.io/yaml"
)

// The Kubernetes example: three documents, each decoded strictly into its
// API type (an unknown or misspelt field fails), with what the issue asks of
// them asserted one by one.

const kubernetesManifest = "../../deploy/kubernetes/bridge.yaml"

type kubernetesObjects struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	secret     *corev1.Secret
}

// decodeKubernetes decodes the manifest's documents strictly into the API
// types of their kind.
func decodeKubernetes(t reporter, manifest []byte) kubernetesObjects {
	var objs kubernetesObjects
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(manifest), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := k8syaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		var into any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			objs.deployment = new(appsv1.Deployment)
			into = objs.deployment
		case "v1 Service":
			objs.service = new(corev1.Service)
			into = objs.service
		case "v1 Secret":
			objs.secret = new(corev1.Secret)
			into = objs.secret
		default:
			t.Fatalf("document %d: unexpected %s %s", i+1, head.APIVersion, head.Kind)
		}
		if err := k8syaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("document %d (%s): %v", i+1, head.Kind, err)
		}
	}
	if objs.deployment == nil || objs.service == nil || objs.secret == nil {
		t.Fatalf("the manifest lacks a Deployment, a Service or a Secret")
	}
	return objs
}

func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile(kubernetesManifest)
	if err != nil {
		t.Fatal(err)
	}
	checkKubernetes(t, b, envNamesRead(t))
}

// reporter is what the checks report to: a *testing.T, or a
// failureRecorder in TestKubernetesManifestChecksFail.
type reporter interface {
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// checkKubernetes reports to t what the manifest lacks; read holds the
// variables cmd/bridge reads.
func checkKubernetes(t reporter, manifest []byte, read map[string]bool) {
	objs := decodeKubernetes(t, manifest)
	d, svc, sec := objs.deployment, objs.service, objs.secret
	pod := d.Spec.Template
	if d.Spec.Selector == nil || !mapsSubset(d.Spec.Selector.MatchLabels, pod.Labels) || !mapsSubset(svc.Spec.Selector, pod.Labels) ||
		len(d.Spec.Selector.MatchLabels) == 0 || len(svc.Spec.Selector) == 0 {
		t.Errorf("the Deployment's selector %v and the Service's %v must select the pods' labels %v", d.Spec.Selector, svc.Spec.Selector, pod.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// Non-root and locked down, at the pod and at the container.
	ps := pod.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("the pod's security context must set runAsNonRoot and seccomp RuntimeDefault: %+v", ps)
	}
	cs := c.SecurityContext
	switch {
	case cs == nil:
		t.Errorf("the container has no security context")
	case cs.RunAsNonRoot == nil || !*cs.RunAsNonRoot:
		t.Errorf("the container does not set runAsNonRoot")
	case cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem:
		t.Errorf("the container's root filesystem is writable")
	case cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation:
		t.Errorf("the container allows privilege escalation")
	case cs.Privileged != nil && *cs.Privileged:
		t.Errorf("the container is privileged")
	case cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0:
		t.Errorf("the container must drop ALL capabilities and add none: %+v", cs.Capabilities)
	case cs.SeccompProfile == nil || cs.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("the container's seccomp profile is not RuntimeDefault")
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the pod mounts a service account token, which the servers could read")
	}

	// Probes on the endpoints the bridge serves, on the port it listens on.
	port := map[string]int32{}
	for _, p := range c.Ports {
		port[p.Name] = p.ContainerPort
	}
	for name, pr := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != name {
			t.Errorf("want an HTTP probe on %s, got %+v", name, pr)
			continue
		}
		p := pr.HTTPGet.Port.IntVal
		if pr.HTTPGet.Port.StrVal != "" {
			p = port[pr.HTTPGet.Port.StrVal]
		}
		if p != 8080 {
			t.Errorf("the probe on %s reaches port %d; the bridge listens on 8080", name, p)
		}
	}

	// Limits: every session's server shares them.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}

	// The environment: every BRIDGE_* variable is one the bridge reads;
	// the secrets come from the Secret, the affinity address from the pod
	// IP through the downward API.
	env := map[string]corev1.EnvVar{}
	var order []string
	for _, e := range c.Env {
		env[e.Name] = e
		order = append(order, e.Name)
		if strings.HasPrefix(e.Name, "BRIDGE_") && !read[e.Name] {
			t.Errorf("the Deployment sets %s, which cmd/bridge does not read", e.Name)
		}
	}
	if v := env["BRIDGE_LISTEN"].Value; v != "0.0.0.0:8080" {
		t.Errorf("BRIDGE_LISTEN = %q; want 0.0.0.0:8080", v)
	}
	for _, name := range []string{"BRIDGE_AUTH_TOKENS", "BRIDGE_AFFINITY_SECRET"} {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != sec.Name || e.ValueFrom.SecretKeyRef.Key != name {
			t.Errorf("%s must come from the Secret %s: %+v", name, sec.Name, e)
			continue
		}
		if _, ok := sec.StringData[name]; !ok {
			t.Errorf("the Secret has no key %s", name)
		} else if sec.StringData[name] != "" {
			t.Errorf("the Secret ships a value for %s: the example must hold no usable credential", name)
		}
	}
	// $(POD_IP) is expanded only from a variable defined before it.
	podIP := ""
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			podIP = e.Name
			break
		}
	}
	if podIP == "" {
		t.Errorf("no variable takes the pod IP from the downward API (fieldRef status.podIP)")
	} else if v := env["BRIDGE_AFFINITY_ADDR"].Value; v != "$("+podIP+"):8080" ||
		slices.Index(order, podIP) > slices.Index(order, "BRIDGE_AFFINITY_ADDR") {
		t.Errorf("BRIDGE_AFFINITY_ADDR = %q; want $(%s):8080, after %s", v, podIP, podIP)
	}
	if env["BRIDGE_SANDBOX"].Value != "local" {
		t.Errorf("BRIDGE_SANDBOX must be local: a pod has no Docker socket")
	}

	// The Service reaches the container's port.
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("want one Service port, got %d", len(svc.Spec.Ports))
	}
	tp := svc.Spec.Ports[0].TargetPort
	if p := tp.IntVal; (tp.StrVal != "" && port[tp.StrVal] != 8080) || (tp.StrVal == "" && p != 8080) {
		t.Errorf("the Service targets %s, not the container's port 8080", tp.String())
	}
	if svc.Spec.SessionAffinity != "" && svc.Spec.SessionAffinity != corev1.ServiceAffinityNone {
		t.Errorf("the Service sets session affinity %s; the bridges route sessions themselves", svc.Spec.SessionAffinity)
	}
}

func mapsSubset(sub, super map[string]string) bool {
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return true
}

// The manifest's checks fail when the manifest is wrong: each breakage
// below must be caught.
func TestKubernetesManifestChecksFail(t *testing.T) {
	good, err := os.ReadFile(kubernetesManifest)
	if err != nil {
		t.Fatal(err)
	}
	read := envNamesRead(t)
	for _, c := range []struct{ name, old, new string }{
		{"unknown field", "terminationGracePeriodSeconds: 120", "terminationGracePeriodSecond: 120"},
		{"writable root", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false"},
		{"escalation", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"},
		{"capabilities", "drop: [ALL]", "drop: [NET_RAW]"},
		{"seccomp", "type: RuntimeDefault\n      containers", "type: Unconfined\n      containers"},
		{"root", "runAsNonRoot: true\n        seccompProfile", "runAsNonRoot: false\n        seccompProfile"},
		{"liveness path", "path: /healthz", "path: /health"},
		{"readiness path", "path: /readyz", "path: /ready"},
		{"limits", "            limits:\n              cpu: \"1\"\n", "            limits:\n"},
		{"variable the bridge does not read", "name: BRIDGE_LOG_FORMAT", "name: BRIDGE_LOGFORMAT"},
		{"token inline", "BRIDGE_AUTH_TOKENS: \"\"", "BRIDGE_AUTH_TOKENS: \"s3cret\""},
		{"affinity address", `value: "$(POD_IP):8080"`, `value: "127.0.0.1:8080"`},
		{"downward API", "fieldPath: status.podIP", "fieldPath: status.hostIP"},
		{"service port", "targetPort: http", "targetPort: 9090"},
	} {
		if !bytes.Contains(good, []byte(c.old)) {
			t.Fatalf("%s: the manifest has no %q", c.name, c.old)
		}
		bad := bytes.Replace(good, []byte(c.old), []byte(c.new), 1)
		ft := &failureRecorder{}
		func() {
			defer func() {
				if r := recover(); r != nil && r != errFatal {
					panic(r)
				}
			}()
			checkKubernetes(ft, bad, read)
		}()
		if !ft.failed {
			t.Errorf("%s: the checks pass a broken manifest", c.name)
		}
	}
}

// failureRecorder records failures instead of failing the test; Fatalf
// panics with errFatal, which the caller recovers, as t.Fatalf would stop.
type failureRecorder struct{ failed bool }

var errFatal = errors.New("fatal")

func (f *failureRecorder) Errorf(string, ...any) { f.failed = true }
func (f *failureRecorder) Fatalf(string, ...any) { f.failed = true; panic(errFatal) }

// The compose example: `docker compose config` (or docker-compose) accepts
// it, and what it sets is checked.
func TestComposeExample(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "compose")
	b, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string
			Ports       []string
			ReadOnly    bool     `yaml:"read_only"`
			CapDrop     []string `yaml:"cap_drop"`
			SecurityOpt []string `yaml:"security_opt"`
			Secrets     []string
		}
		Secrets map[string]struct{ File string }
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	read := envNamesRead(t)
	br, ok := compose.Services["bridge"]
	if !ok {
		t.Fatal("no bridge service")
	}
	for k, v := range br.Environment {
		if strings.HasPrefix(k, "BRIDGE_") && !read[k] {
			t.Errorf("compose.yaml sets %s, which cmd/bridge does not read", k)
		}
		if k == "BRIDGE_AUTH_TOKENS" || k == "BRIDGE_AFFINITY_SECRET" {
			t.Errorf("compose.yaml holds %s=%q; secrets go in files", k, v)
		}
	}
	if f := br.Environment["BRIDGE_AUTH_TOKEN_FILE"]; len(br.Secrets) != 1 || f != "/run/secrets/"+br.Secrets[0] || compose.Secrets[br.Secrets[0]].File == "" {
		t.Errorf("the tokens must come from a compose secret file: BRIDGE_AUTH_TOKEN_FILE=%q, secrets %v", f, br.Secrets)
	}
	if !br.ReadOnly || !slices.Equal(br.CapDrop, []string{"ALL"}) || !slices.Contains(br.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("the bridge service is not locked down: read_only %v, cap_drop %v, security_opt %v", br.ReadOnly, br.CapDrop, br.SecurityOpt)
	}
	for _, p := range br.Ports {
		if !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("port %q is published on every interface", p)
		}
	}

	var argv []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		argv = []string{"docker", "compose"}
	} else if p, err := exec.LookPath("docker-compose"); err == nil {
		argv = []string{p}
	} else {
		t.Skip("neither the docker compose plugin nor docker-compose is installed: compose.yaml checked by the assertions above only, not by compose itself")
	}
	cmd := exec.Command(argv[0], append(argv[1:], "-f", "compose.yaml", "config", "--quiet")...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(argv, " "), err, out)
	}
}
