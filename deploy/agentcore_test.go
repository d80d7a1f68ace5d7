package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestAgentCoreCheck(t *testing.T) {
	const role = "arn:aws:iam::123456789012:role/AgentCoreRuntime"
	spec := mustSpec(t, "npx:pkg@1.0.0")
	for name, c := range map[string]AWSConfig{
		"image":  {Target: TargetAgentCore, Stack: "demo_1", Image: "img:1", RoleArn: role},
		"spec":   {Target: TargetAgentCore, Stack: "demo", Spec: spec, BridgeBinary: "b", RoleArn: role, Command: []string{"srv"}},
		"jwt":    {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, JWTDiscoveryURL: "https://idp.example.com/.well-known/openid-configuration", JWTAllowedAudience: []string{"a"}},
		"delete": {Target: TargetAgentCore, Stack: "demo", Delete: true},
	} {
		if err := c.Check(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, c := range map[string]AWSConfig{
		"unknown target":         {Target: "gke", Stack: "demo", Image: "img:1", AllowHTTP: true},
		"dash in the name":       {Target: TargetAgentCore, Stack: "de-mo", Image: "img:1", RoleArn: role},
		"name too long":          {Target: TargetAgentCore, Stack: strings.Repeat("a", 49), Image: "img:1", RoleArn: role},
		"no role":                {Target: TargetAgentCore, Stack: "demo", Image: "img:1"},
		"not a role":             {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: "arn:aws:iam::123456789012:user/u"},
		"neither image nor spec": {Target: TargetAgentCore, Stack: "demo", RoleArn: role},
		"command with an image":  {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, Command: []string{"srv"}},
		"amd64 image":            {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, Arch: "amd64"},
		"certificate":            {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, CertificateArn: "arn:x"},
		"task count":             {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, MaxTasks: 3},
		"template parameter":     {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, Parameters: map[string]string{"TaskCpu": "1"}},
		"jwt without clients":    {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, JWTDiscoveryURL: "https://idp.example.com/.well-known/openid-configuration"},
		"jwt over http":          {Target: TargetAgentCore, Stack: "demo", Image: "img:1", RoleArn: role, JWTDiscoveryURL: "http://idp.example.com/.well-known/openid-configuration", JWTAllowedClients: []string{"c"}},
		"role for ecs":           {Stack: "demo", Image: "img:1", AllowHTTP: true, RoleArn: role},
		"delete with a role":     {Target: TargetAgentCore, Stack: "demo", Delete: true, RoleArn: role},
	} {
		if err := c.Check(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Check() = %v; want ErrConfig", name, err)
		}
	}
}

func TestAgentCoreInvokeURL(t *testing.T) {
	got := AgentCoreInvokeURL("us-west-2", "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/everything-AbCdE12345")
	want := "https://bedrock-agentcore.us-west-2.amazonaws.com/runtimes/arn%3Aaws%3Abedrock-agentcore%3Aus-west-2%3A123456789012%3Aruntime%2Feverything-AbCdE12345/invocations?qualifier=DEFAULT"
	if got != want {
		t.Errorf("AgentCoreInvokeURL\n got %s\nwant %s", got, want)
	}
}

// The real aws CLI validates every request against the AgentCore control
// plane's service model before it looks for credentials: with none, a
// well-formed request fails for want of credentials, a malformed one with
// "Parameter validation failed". Each AgentCore command a deploy runs (and
// its dry run shows) must get that far.
func TestAgentCoreCommandsPassTheAWSCLIValidation(t *testing.T) {
	env := isolatedAWSEnv(t)
	awsPath, _ := exec.LookPath("aws")
	const role = "arn:aws:iam::123456789012:role/AgentCoreRuntime"
	for name, c := range map[string]*AWSConfig{
		"image": {Target: TargetAgentCore, Stack: "demo", Region: "us-west-2", Image: "123456789012.dkr.ecr.us-west-2.amazonaws.com/demo:1", RoleArn: role},
		"jwt": {Target: TargetAgentCore, Stack: "demo", Region: "us-west-2", Image: "123456789012.dkr.ecr.us-west-2.amazonaws.com/demo:1", RoleArn: role,
			JWTDiscoveryURL: "https://idp.example.com/.well-known/openid-configuration", JWTAllowedClients: []string{"c1", "c2"}, JWTAllowedAudience: []string{"a"}},
		"delete": {Target: TargetAgentCore, Stack: "demo", Region: "us-west-2", Delete: true},
	} {
		d := &Deployer{Config: c, Env: env}
		s := &state{awsPath: awsPath, region: "us-west-2", account: "123456789012", runtimeID: "demo-AbCdE12345"}
		var cmds [][]string
		for _, st := range d.steps() {
			for _, f := range []func(*state) []string{st.argv, st.alt} {
				if f != nil {
					if argv := f(s); argv[1] == "bedrock-agentcore-control" {
						cmds = append(cmds, argv)
					}
				}
			}
		}
		want := []string{"list-agent-runtimes", "create-agent-runtime", "update-agent-runtime", "get-agent-runtime"}
		if c.Delete {
			want = []string{"list-agent-runtimes", "delete-agent-runtime"}
		}
		var got []string
		for _, argv := range cmds {
			got = append(got, argv[2])
			_, err := d.aws(t.Context(), s, false, argv[1:]...)
			if err != nil && strings.Contains(err.Error(), "Invalid choice") {
				t.Skipf("this aws CLI does not know AgentCore's control plane: %v", err)
			}
			if !errors.Is(err, ErrNoCredentials) {
				t.Errorf("%s: %s: %v; want it to fail for want of credentials only", name, argv[2], err)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: commands %q; want %q", name, got, want)
		}
	}
	// The check can fail: a field the model does not have.
	d := &Deployer{Config: &AWSConfig{Target: TargetAgentCore}, Env: env}
	s := &state{awsPath: awsPath, region: "us-west-2"}
	_, err := d.aws(t.Context(), s, false, "bedrock-agentcore-control", "create-agent-runtime", "--region", "us-west-2",
		"--cli-input-json", `{"agentRuntimeName":"demo","containerPort":8000}`)
	if err == nil || errors.Is(err, ErrNoCredentials) || !strings.Contains(err.Error(), "Parameter validation failed") {
		t.Errorf("a malformed request: %v; want a parameter validation error", err)
	}
}

// fakeControlPlane writes an aws executable that logs its arguments and
// answers as AgentCore's control plane would (the shapes of the API
// reference), for the flow of Run, which no account is here to run
// against: existing names a runtime that list-agent-runtimes finds.
func fakeControlPlane(t *testing.T, existing string) (awsPath, log string) {
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$*" >> ` + log + `
case "$1 $2" in
"sts get-caller-identity") echo 123456789012 ;;
"bedrock-agentcore-control list-agent-runtimes") echo "` + existing + `" ;;
"bedrock-agentcore-control create-agent-runtime") echo '{"agentRuntimeArn":"arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/demo-NewNew1234","agentRuntimeId":"demo-NewNew1234","status":"CREATING"}' ;;
"bedrock-agentcore-control update-agent-runtime") echo '{"agentRuntimeArn":"arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/` + existing + `","agentRuntimeId":"` + existing + `","status":"UPDATING"}' ;;
"bedrock-agentcore-control get-agent-runtime") echo '{"status":"READY"}' ;;
*) echo "unexpected: $*" >&2; exit 2 ;;
esac
`
	awsPath = filepath.Join(dir, "aws")
	if err := os.WriteFile(awsPath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return awsPath, log
}

func TestAgentCoreRunCreatesOrUpdates(t *testing.T) {
	for _, existing := range []string{"", "demo-OldOld1234"} {
		awsPath, log := fakeControlPlane(t, existing)
		var out, progress bytes.Buffer
		d := &Deployer{Config: &AWSConfig{Target: TargetAgentCore, Stack: "demo", Region: "us-west-2",
			Image: "123456789012.dkr.ecr.us-west-2.amazonaws.com/demo:1", RoleArn: "arn:aws:iam::123456789012:role/r"},
			Out: &out, Progress: &progress, AWSCLI: awsPath, Env: []string{"PATH=/usr/bin:/bin"}}
		if err := d.Run(t.Context()); err != nil {
			t.Fatalf("existing %q: %v\n%s", existing, err, progress.String())
		}
		b, _ := os.ReadFile(log)
		calls := strings.Split(strings.TrimSpace(string(b)), "\n")
		var verbs []string
		for _, c := range calls {
			f := strings.Fields(c)
			verbs = append(verbs, f[1])
		}
		want, id := []string{"get-caller-identity", "list-agent-runtimes", "create-agent-runtime", "get-agent-runtime"}, "demo-NewNew1234"
		if existing != "" {
			want, id = []string{"get-caller-identity", "list-agent-runtimes", "update-agent-runtime", "get-agent-runtime"}, existing
			if !strings.Contains(calls[2], `"agentRuntimeId":"`+existing+`"`) || strings.Contains(calls[2], "agentRuntimeName") {
				t.Errorf("the update does not name the runtime by its id: %s", calls[2])
			}
		}
		if !slices.Equal(verbs, want) {
			t.Errorf("existing %q: calls %q; want %q", existing, verbs, want)
		}
		if !strings.Contains(calls[3], "--agent-runtime-id "+id) {
			t.Errorf("the wait polls another runtime: %s", calls[3])
		}
		if u := AgentCoreInvokeURL("us-west-2", "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/"+id); !strings.Contains(out.String(), "MCP endpoint: "+u+"\n") {
			t.Errorf("existing %q: the endpoint is not printed:\n%s", existing, out.String())
		}
	}
}
