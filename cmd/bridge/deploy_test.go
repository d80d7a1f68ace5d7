package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/cloudformation"
	"github.com/mcp-bridge/mcp-bridge/deploy"
)

var updateDeployGolden = flag.Bool("update-deploy-golden", false, "rewrite cmd/bridge/testdata/deploy/*.golden from the current output")

// pkgDir is the package's directory, where tests start (some change it).
var pkgDir, _ = os.Getwd()

// golden compares got with testdata/deploy/name, or rewrites it with
// -update-deploy-golden.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(pkgDir, "testdata", "deploy", name)
	if *updateDeployGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-deploy-golden to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update-deploy-golden after checking the change):\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first differing line of two texts, with context.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n- " + wl + "\n+ " + gl
		}
	}
	return "(no line differs)"
}

// noAmbientAWS keeps this machine's AWS settings out of the output.
func noAmbientAWS(t *testing.T) {
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
}

func TestDeployDryRunGolden(t *testing.T) {
	noAmbientAWS(t)
	// Nothing on PATH and no Docker: a dry run must not need them.
	// The binaries the dry runs name, which they check: static Linux
	// executables of each architecture.
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "bridge-linux-"+arch), filepath.Join(pkgDir, "..", "..", "examples", "hello"))
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	t.Chdir(dir)
	t.Setenv("PATH", t.TempDir())
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"dry-run-npx-https.golden", []string{"aws", "--stack", "everything", "--region", "eu-west-1",
			"--from", "npx:@modelcontextprotocol/server-everything@2025.1.14", "--bridge-binary", "bridge-linux-amd64",
			"--certificate-arn", "arn:aws:acm:eu-west-1:123456789012:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
			"--domain", "mcp.example.com", "--hosted-zone-id", "Z0123456789ABCDEFGHIJ", "--dry-run"}},
		{"dry-run-uvx-http.golden", []string{"aws", "--stack", "fetch", "--region", "us-east-1",
			"--from", "uvx:mcp-server-fetch==2025.4.7", "--bridge-binary", "bridge-linux-arm64", "--allow-http",
			"--desired-count", "3", "--max-tasks", "6", "--parameter", "TaskCpu=1024", "--parameter", "TaskMemory=2048", "--dry-run"}},
		{"dry-run-image-command.golden", []string{"aws", "--stack", "acme", "--region", "ap-southeast-2",
			"--image", "123456789012.dkr.ecr.ap-southeast-2.amazonaws.com/acme/mcp:1.2.3", "--arch", "arm64",
			"--allow-http", "--auth-secret-arn", "arn:aws:secretsmanager:ap-southeast-2:123456789012:secret:acme-tokens-AbCdEf",
			"--dry-run", "--", "/app/server", "--root", "/data dir"}},
		{"dry-run-delete.golden", []string{"aws", "--stack", "everything", "--region", "eu-west-1", "--delete", "--dry-run"}},
		{"dry-run-agentcore-npx.golden", []string{"aws", "--target", "agentcore", "--stack", "everything", "--region", "us-west-2",
			"--from", "npx:@modelcontextprotocol/server-everything@2025.1.14", "--bridge-binary", "bridge-linux-arm64",
			"--role-arn", "arn:aws:iam::123456789012:role/AgentCoreRuntime", "--dry-run"}},
		{"dry-run-agentcore-image-jwt.golden", []string{"aws", "--target", "agentcore", "--stack", "acme_tools", "--region", "eu-central-1",
			"--image", "123456789012.dkr.ecr.eu-central-1.amazonaws.com/acme/mcp:1.2.3-arm64",
			"--role-arn", "arn:aws:iam::123456789012:role/AgentCoreRuntime",
			"--jwt-discovery-url", "https://cognito-idp.eu-central-1.amazonaws.com/eu-central-1_AbCdEf123/.well-known/openid-configuration",
			"--jwt-allowed-clients", "3n4mpl3cl13nt1d,0th3rcl13nt", "--dry-run"}},
		{"dry-run-agentcore-delete.golden", []string{"aws", "--target", "agentcore", "--stack", "everything", "--region", "us-west-2", "--delete", "--dry-run"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := runDeploy(c.args, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if errb.Len() != 0 {
				t.Errorf("stderr: %s", errb.String())
			}
			golden(t, c.name, out.Bytes())
		})
	}
}

// TestDeployDryRunShowsWhatItWouldDo checks the golden outputs for what the
// issue requires of a dry run, so that an -update cannot quietly lose it.
func TestDeployDryRunShowsWhatItWouldDo(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	npx := read("dry-run-npx-https.golden")
	for _, want := range []string{
		"# Dockerfile",
		`RUN ["npm","install","--omit=dev","--save-exact","@modelcontextprotocol/server-everything@2025.1.14"]`,
		string(cloudformation.Template),
		"$ aws sts get-caller-identity --region eu-west-1",
		"$ aws ecr describe-repositories --region eu-west-1 --repository-names mcp-bridge/everything",
		"$ aws ecr create-repository --region eu-west-1 --repository-name mcp-bridge/everything",
		"$ aws ecr get-login-password --region eu-west-1",
		"POST /images/<account-id>.dkr.ecr.eu-west-1.amazonaws.com/mcp-bridge/everything:2025.1.14-<content-hash>/push",
		"$ aws cloudformation deploy --region eu-west-1 --stack-name everything",
		"CertificateArn=arn:aws:acm:eu-west-1:123456789012:certificate/",
		"$ aws cloudformation describe-stacks --region eu-west-1 --stack-name everything",
		`"Authorization": "Bearer ${MCP_BRIDGE_TOKEN}"`,
	} {
		if !strings.Contains(npx, want) {
			t.Errorf("the npx dry run lacks %q", want)
		}
	}
	img := read("dry-run-image-command.golden")
	if strings.Contains(img, "# Dockerfile") || strings.Contains(img, "aws ecr") {
		t.Errorf("deploying an existing image builds or pushes something")
	}
	if !strings.Contains(img, "ServerCommand=--,/app/server,--root,/data dir") || !strings.Contains(img, "CpuArchitecture=ARM64") {
		t.Errorf("the image dry run does not pass the command and architecture")
	}
	del := read("dry-run-delete.golden")
	if !strings.Contains(del, "$ aws cloudformation delete-stack --region eu-west-1 --stack-name everything") ||
		!strings.Contains(del, "$ aws cloudformation wait stack-delete-complete") || strings.Contains(del, "AWSTemplateFormatVersion") {
		t.Errorf("the delete dry run is wrong:\n%s", del)
	}
}

// agentCoreRequest is what the dry run shows of CreateAgentRuntime's body
// (field names as in the AgentCore control plane API reference).
type agentCoreRequest struct {
	AgentRuntimeName        string
	Description             string
	AgentRuntimeArtifact    struct{ ContainerConfiguration struct{ ContainerUri string } }
	RoleArn                 string
	NetworkConfiguration    struct{ NetworkMode string }
	ProtocolConfiguration   struct{ ServerProtocol string }
	EnvironmentVariables    map[string]string
	Tags                    map[string]string
	AuthorizerConfiguration *struct {
		CustomJWTAuthorizer struct {
			DiscoveryUrl                    string
			AllowedClients, AllowedAudience []string
		}
	}
}

// TestDeployAgentCoreDryRun checks the AgentCore golden outputs for what
// the issue requires: the image built and pushed to ECR as for ECS, then
// the runtime creation request with the container URI, protocol MCP, the
// network mode and an environment that makes the bridge serve AgentCore's
// port and path; no CloudFormation.
func TestDeployAgentCoreDryRun(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// request decodes the creation request the dry run shows, strictly.
	request := func(out string) (req agentCoreRequest) {
		_, rest, ok := strings.Cut(out, "# AgentCore runtime request")
		if !ok {
			t.Fatalf("no AgentCore runtime request in:\n%s", out)
		}
		start, end := strings.Index(rest, "\n{"), strings.Index(rest, "\n}\n")
		if start < 0 || end < start {
			t.Fatalf("no JSON request after the heading")
		}
		dec := json.NewDecoder(strings.NewReader(rest[start : end+3]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			t.Fatalf("the request is not the expected JSON: %v", err)
		}
		return req
	}
	names := envNamesRead(t)
	for name, c := range map[string]struct{ runtime, image, jwt string }{
		"dry-run-agentcore-npx.golden": {"everything", "<account-id>.dkr.ecr.us-west-2.amazonaws.com/mcp-bridge/everything:2025.1.14-<content-hash>", ""},
		"dry-run-agentcore-image-jwt.golden": {"acme_tools", "123456789012.dkr.ecr.eu-central-1.amazonaws.com/acme/mcp:1.2.3-arm64",
			"https://cognito-idp.eu-central-1.amazonaws.com/eu-central-1_AbCdEf123/.well-known/openid-configuration"},
	} {
		out := read(name)
		req := request(out)
		if req.AgentRuntimeName != c.runtime || req.AgentRuntimeArtifact.ContainerConfiguration.ContainerUri != c.image ||
			req.ProtocolConfiguration.ServerProtocol != "MCP" || req.NetworkConfiguration.NetworkMode != "PUBLIC" ||
			req.RoleArn != "arn:aws:iam::123456789012:role/AgentCoreRuntime" {
			t.Errorf("%s: request %+v", name, req)
		}
		env := req.EnvironmentVariables
		if env["BRIDGE_LISTEN"] != "0.0.0.0:8000" || env["BRIDGE_PATH"] != "/mcp" || env["BRIDGE_SANDBOX"] != "local" ||
			env["BRIDGE_ACCEPT_SESSION_ID"] != "true" {
			t.Errorf("%s: the bridge would not serve AgentCore's port 8000 and path /mcp, or refuse its session IDs: %v", name, env)
		}
		for k := range env {
			if !names[k] {
				t.Errorf("%s: the runtime's environment sets %s, which cmd/bridge does not read", name, k)
			}
		}
		if env["BRIDGE_AUTH_TOKENS"] != "" || env["BRIDGE_AFFINITY_SECRET"] != "" {
			t.Errorf("%s: a secret in the runtime's environment, which the control plane shows to anyone who can read the runtime", name)
		}
		if c.jwt == "" && req.AuthorizerConfiguration != nil || c.jwt != "" && (req.AuthorizerConfiguration == nil ||
			req.AuthorizerConfiguration.CustomJWTAuthorizer.DiscoveryUrl != c.jwt || len(req.AuthorizerConfiguration.CustomJWTAuthorizer.AllowedClients) != 2) {
			t.Errorf("%s: authorizer %+v", name, req.AuthorizerConfiguration)
		}
		if strings.Contains(out, "AWSTemplateFormatVersion") || strings.Contains(out, "aws cloudformation") {
			t.Errorf("%s: an AgentCore deploy shows CloudFormation", name)
		}
		for _, want := range []string{
			"$ aws bedrock-agentcore-control list-agent-runtimes",
			"$ aws bedrock-agentcore-control create-agent-runtime --region ",
			"$ aws bedrock-agentcore-control update-agent-runtime --region ",
			"$ aws bedrock-agentcore-control get-agent-runtime --region ",
			"/invocations?qualifier=DEFAULT",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	npx := read("dry-run-agentcore-npx.golden")
	for _, want := range []string{
		"# Dockerfile",
		"read bridge-linux-arm64 (a static Linux arm64 executable)",
		"$ aws ecr get-login-password --region us-west-2",
		"POST /images/<account-id>.dkr.ecr.us-west-2.amazonaws.com/mcp-bridge/everything:2025.1.14-<content-hash>/push",
	} {
		if !strings.Contains(npx, want) {
			t.Errorf("the AgentCore npx dry run lacks %q", want)
		}
	}
	if img := read("dry-run-agentcore-image-jwt.golden"); strings.Contains(img, "# Dockerfile") || strings.Contains(img, "aws ecr") ||
		!strings.Contains(img, `"Authorization": "Bearer ${AGENTCORE_TOKEN}"`) {
		t.Errorf("the AgentCore image dry run builds or pushes, or gives no client configuration")
	}
	del := read("dry-run-agentcore-delete.golden")
	if !strings.Contains(del, "$ aws bedrock-agentcore-control delete-agent-runtime --region us-west-2 --agent-runtime-id") || strings.Contains(del, "cloudformation") {
		t.Errorf("the AgentCore delete dry run is wrong:\n%s", del)
	}
}

func TestDeployUsageErrors(t *testing.T) {
	noAmbientAWS(t)
	const role = "arn:aws:iam::123456789012:role/AgentCoreRuntime"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gcp"}, `unknown target "gcp"`},
		{[]string{"aws", "--region", "eu-west-1", "--image", "x:1", "--allow-http"}, "--stack is required"},
		{[]string{"aws", "--stack", "s", "--image", "x:1"}, "--allow-http"},
		{[]string{"aws", "--stack", "s", "--allow-http"}, "exactly one of --image"},
		{[]string{"aws", "--stack", "s", "--from", "npx:pkg@latest", "--allow-http"}, "must be exact"},
		{[]string{"aws", "--stack", "s", "--image", "x:1", "--allow-http", "--parameter", "Bogus=1"}, "no such parameter"},
		{[]string{"aws", "--stack", "s", "--image", "x:1", "--allow-http", "--parameter", "novalue"}, "KEY=VALUE"},
		{[]string{"aws", "--stack", "s", "--image", "x:1", "--allow-http", "stray"}, "after --"},
		{[]string{"aws", "--stack", "s", "--image", "x:1", "--allow-http", "--"}, "nothing after --"},
		{[]string{"aws", "--target", "gke", "--stack", "s", "--image", "x:1"}, `--target "gke": want ecs or agentcore`},
		{[]string{"aws", "--stack", "s", "--image", "x:1", "--allow-http", "--role-arn", role}, "apply to --target agentcore only"},
		{[]string{"aws", "--target", "agentcore", "--stack", "my-tools", "--image", "x:1", "--role-arn", role}, "no dashes"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1"}, "--role-arn \"\": want the ARN of the IAM role"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1", "--role-arn", role, "--allow-http"}, "--allow-http applies to --target ecs only"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1", "--role-arn", role, "--desired-count", "2"}, "--desired-count applies to --target ecs only"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1", "--role-arn", role, "--arch", "amd64"}, "ARM64 containers only"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1", "--role-arn", role, "--", "srv"}, "runs its image's own command"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1", "--role-arn", role,
			"--jwt-discovery-url", "https://idp.example.com/.well-known/openid-configuration"}, "needs --jwt-allowed-clients or --jwt-allowed-audience"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1", "--role-arn", role,
			"--jwt-discovery-url", "http://idp.example.com/.well-known/openid-configuration", "--jwt-allowed-clients", "c"}, "want the https URL"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--image", "x:1", "--role-arn", role, "--jwt-allowed-audience", "a"}, "need --jwt-discovery-url"},
		{[]string{"aws", "--target", "agentcore", "--stack", "s", "--delete", "--role-arn", role}, "--delete takes no image"},
	} {
		var out, errb bytes.Buffer
		if code := runDeploy(c.args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d; want 2", c.args, code)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: stderr %q; want it to contain %q", c.args, errb.String(), c.want)
		}
	}
}

func TestDeployReportsMissingCLI(t *testing.T) {
	// A real run with no aws CLI on PATH stops at the first step and says
	// what to install.
	t.Setenv("PATH", t.TempDir())
	var out, errb bytes.Buffer
	code := runDeploy([]string{"aws", "--stack", "s", "--region", "eu-west-1", "--image", "x:1", "--allow-http"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), deploy.ErrNoAWSCLI.Error()) || !strings.Contains(errb.String(), "install AWS CLI") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// A dry run checks the bridge binary it would ship: a Linux executable of
// an architecture the images run on, statically linked.
func TestDeployDryRunChecksTheBinary(t *testing.T) {
	noAmbientAWS(t)
	dir := t.TempDir()
	i386 := filepath.Join(dir, "bridge-386")
	build := exec.Command("go", "build", "-trimpath", "-o", i386, "../../examples/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=386")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script := filepath.Join(dir, "bridge.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n# a shell script, not an ELF executable\n"), 0o755)
	for bin, want := range map[string]string{
		i386:   "bridge deploy aws: unusable bridge binary: " + i386 + " is built for EM_386; images run on amd64 or arm64; build one with: CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -o bridge-linux ./cmd/bridge, and pass --bridge-binary bridge-linux\n",
		script: "bridge deploy aws: unusable bridge binary: " + script + " is not a Linux executable (ELF DETAIL); build one with: CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -o bridge-linux ./cmd/bridge, and pass --bridge-binary bridge-linux\n",
	} {
		var out, errb bytes.Buffer
		code := runDeploy([]string{"aws", "--stack", "s", "--region", "eu-west-1", "--from", "npx:pkg@1.0.0", "--allow-http",
			"--bridge-binary", bin, "--dry-run"}, &out, &errb)
		// debug/elf's own words vary between Go releases.
		got := regexp.MustCompile(`executable \(.*?\); build`).ReplaceAllString(errb.String(), "executable (ELF DETAIL); build")
		if code != 2 || got != want || out.Len() != 0 {
			t.Errorf("dry run with %s: exit %d, stdout %d bytes, stderr:\n%s\nwant:\n%s", bin, code, out.Len(), got, want)
		}
	}
	// AgentCore runs ARM64 only: an amd64 bridge is refused.
	amd64 := filepath.Join(dir, "bridge-amd64")
	build = exec.Command("go", "build", "-trimpath", "-o", amd64, "../../examples/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out, errb bytes.Buffer
	code := runDeploy([]string{"aws", "--target", "agentcore", "--stack", "s", "--region", "eu-west-1", "--from", "npx:pkg@1.0.0",
		"--role-arn", "arn:aws:iam::123456789012:role/r", "--bridge-binary", amd64, "--dry-run"}, &out, &errb)
	if want := "bridge deploy aws: unusable bridge binary: " + amd64 + " is built for amd64; AgentCore runs ARM64 containers only; build one with: CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath -o bridge-linux-arm64 ./cmd/bridge, and pass --bridge-binary bridge-linux-arm64\n"; code != 2 || errb.String() != want || out.Len() != 0 {
		t.Errorf("AgentCore dry run with an amd64 bridge: exit %d, stdout %d bytes, stderr:\n%s\nwant:\n%s", code, out.Len(), errb.String(), want)
	}
}

// A dry run without --bridge-binary builds nothing and ships nothing, so
// it does not refuse this executable for the target (an
// AgentCore dry run on an amd64 machine exited 2): it prints the plan and,
// on stderr, a note saying what the real run needs.
func TestDeployDryRunDefaultBinary(t *testing.T) {
	noAmbientAWS(t)
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	for _, args := range [][]string{
		{"aws", "--target", "agentcore", "--stack", "demo", "--region", "us-west-2",
			"--from", "npx:@modelcontextprotocol/server-everything@2025.1.14",
			"--role-arn", "arn:aws:iam::123456789012:role/AgentCoreRuntime", "--dry-run"},
		{"aws", "--stack", "demo", "--region", "eu-west-1", "--from", "npx:@modelcontextprotocol/server-everything@2025.1.14",
			"--allow-http", "--dry-run"},
	} {
		var out, errb bytes.Buffer
		code := runDeploy(args, &out, &errb)
		if code != 0 || !strings.Contains(out.String(), "<this executable>") {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr:\n%s", args, code, out.Len(), errb.String())
			continue
		}
		// The test binary is no static Linux executable for every target
		// (-race links it dynamically; AgentCore wants arm64): the note
		// names the flag that fixes it.
		if errb.Len() > 0 && (!strings.HasPrefix(errb.String(), "bridge deploy aws: note: ") || !strings.Contains(errb.String(), "--bridge-binary")) {
			t.Errorf("%v: stderr %q, want a note naming --bridge-binary", args, errb.String())
		}
	}
}
