package deploy

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func mustSpec(t *testing.T, s string) *Spec {
	t.Helper()
	sp, err := ParseSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func TestAWSConfigCheck(t *testing.T) {
	spec := mustSpec(t, "npx:pkg@1.0.0")
	ok := AWSConfig{Stack: "demo", Image: "img:1", AllowHTTP: true}
	if err := ok.Check(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for name, c := range map[string]AWSConfig{
		"bad stack name":         {Stack: "1demo", Image: "img:1", AllowHTTP: true},
		"stack name underscore":  {Stack: "de_mo", Image: "img:1", AllowHTTP: true},
		"neither image nor spec": {Stack: "demo", AllowHTTP: true},
		"both image and spec":    {Stack: "demo", Image: "img:1", Spec: spec, BridgeBinary: "b", AllowHTTP: true},
		"spec without binary":    {Stack: "demo", Spec: spec, AllowHTTP: true},
		"plain HTTP not allowed": {Stack: "demo", Image: "img:1"},
		"zone without domain":    {Stack: "demo", Image: "img:1", AllowHTTP: true, HostedZoneID: "Z1"},
		"comma in an argument":   {Stack: "demo", Image: "img:1", AllowHTTP: true, Command: []string{"srv", "--list=a,b"}},
		"counts out of order":    {Stack: "demo", Image: "img:1", AllowHTTP: true, MinTasks: 3, MaxTasks: 2},
		"desired above max":      {Stack: "demo", Image: "img:1", AllowHTTP: true, DesiredCount: 9},
		"managed parameter":      {Stack: "demo", Image: "img:1", AllowHTTP: true, Parameters: map[string]string{"Image": "x"}},
		"unknown parameter":      {Stack: "demo", Image: "img:1", AllowHTTP: true, Parameters: map[string]string{"Nope": "x"}},
		"bad arch":               {Stack: "demo", Image: "img:1", AllowHTTP: true, Arch: "386"},
		"delete with an image":   {Stack: "demo", Image: "img:1", Delete: true},
	} {
		if err := c.Check(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Check() = %v; want ErrConfig", name, err)
		}
	}
	del := AWSConfig{Stack: "demo", Delete: true}
	if err := del.Check(); err != nil {
		t.Errorf("delete: %v", err)
	}
}

func TestParameters(t *testing.T) {
	c := &AWSConfig{
		Stack: "demo", Image: "img:1", AllowHTTP: true, Command: []string{"srv", "--flag"},
		DomainName: "mcp.example.com", Parameters: map[string]string{"TaskCpu": "1024"},
	}
	got := c.parameters("img:1", "arm64")
	want := []string{
		"Image=img:1", "ServerCommand=--,srv,--flag", "CpuArchitecture=ARM64", "TaskCpu=1024",
		"DesiredCount=2", "MinTasks=1", "MaxTasks=4", "CertificateArn=", "DomainName=mcp.example.com",
		"HostedZoneId=", "AuthTokenSecretArn=",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parameters\n got %q\nwant %q", got, want)
	}
	// A built image carries its command in CMD: ServerCommand is cleared,
	// so that an earlier deploy's command does not linger.
	c = &AWSConfig{Stack: "demo", Spec: mustSpec(t, "npx:pkg@1.0.0"), BridgeBinary: "b", AllowHTTP: true, Command: []string{"x"}}
	for _, p := range c.parameters("ref", "amd64") {
		if strings.HasPrefix(p, "ServerCommand=") && p != "ServerCommand=" {
			t.Errorf("built image: %s", p)
		}
	}
}

// isolatedAWSEnv is an environment in which the aws CLI finds no
// credentials and no configuration, and makes no network call looking for
// them (the instance metadata service is off).
func isolatedAWSEnv(t *testing.T, extra ...string) []string {
	dir := t.TempDir()
	env := []string{
		"PATH=" + filepathListOfAWS(t),
		"HOME=" + dir,
		"AWS_CONFIG_FILE=" + filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
	}
	return append(env, extra...)
}

// filepathListOfAWS returns a PATH holding the aws CLI and what its
// launcher needs (it may be a shell-script shim).
func filepathListOfAWS(t *testing.T) string {
	p, err := exec.LookPath("aws")
	if err != nil {
		t.Skip("the aws CLI is not installed here; the tests of its error paths need it")
	}
	return filepath.Dir(p) + ":/usr/local/bin:/usr/bin:/bin"
}

func TestRunWithoutAWSCLI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out bytes.Buffer
	d := &Deployer{Config: &AWSConfig{Stack: "demo", Region: "eu-west-1", Image: "img:1", AllowHTTP: true}, Out: &out}
	err := d.Run(t.Context())
	if !errors.Is(err, ErrNoAWSCLI) || !strings.Contains(err.Error(), "install AWS CLI") {
		t.Fatalf("Run = %v; want ErrNoAWSCLI with an install hint", err)
	}
	if !strings.Contains(out.String(), "[1/") {
		t.Errorf("no step printed: %q", out.String())
	}
}

func TestRunWithoutRegion(t *testing.T) {
	env := isolatedAWSEnv(t)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	var out bytes.Buffer
	d := &Deployer{Config: &AWSConfig{Stack: "demo", Image: "img:1", AllowHTTP: true}, Out: &out, Env: env}
	err := d.Run(t.Context())
	if !errors.Is(err, ErrNoRegion) || !strings.Contains(err.Error(), "--region") {
		t.Fatalf("Run = %v; want ErrNoRegion telling about --region", err)
	}
}

func TestRunWithoutCredentials(t *testing.T) {
	t.Parallel()
	// The real aws CLI, with no credentials anywhere: it fails before
	// sending anything, and the error must say what to do.
	env := isolatedAWSEnv(t)
	var out bytes.Buffer
	d := &Deployer{Config: &AWSConfig{Stack: "demo", Region: "eu-west-1", Image: "img:1", AllowHTTP: true}, Out: &out, Env: env}
	err := d.Run(t.Context())
	if !errors.Is(err, ErrNoCredentials) || !strings.Contains(err.Error(), "aws configure") {
		t.Fatalf("Run = %v; want ErrNoCredentials with a hint", err)
	}
	if !strings.Contains(err.Error(), "Find the AWS account") {
		t.Errorf("the error does not name the step: %v", err)
	}
}

func TestDryRunRunsNothing(t *testing.T) {
	// With nothing on PATH a dry run still prints every step: it looks
	// nothing up and runs nothing.
	t.Setenv("PATH", t.TempDir())
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	var out bytes.Buffer
	d := &Deployer{Config: &AWSConfig{
		Stack: "demo", Region: "eu-west-1", Spec: mustSpec(t, "npx:pkg@1.0.0"),
		BridgeBinary: "/nonexistent/bridge", AllowHTTP: true,
	}}
	if err := d.DryRun(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"RUN [\"npm\",\"install\"",
		"AWSTemplateFormatVersion",
		"$ aws sts get-caller-identity --region eu-west-1",
		"$ aws ecr create-repository --region eu-west-1 --repository-name mcp-bridge/demo",
		"$ aws cloudformation deploy --region eu-west-1 --stack-name demo",
		"'Image=<account-id>.dkr.ecr.eu-west-1.amazonaws.com/mcp-bridge/demo:1.0.0-<content-hash>'",
		"MCP endpoint: <McpEndpoint output>",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
}

func TestRunFromSpecStopsAtCredentials(t *testing.T) {
	t.Parallel()
	// --from reads and checks the binary and connects to the Docker Engine
	// before the first AWS call, so that a bad binary or a stopped engine is
	// reported before anything is built; here it then stops at the missing
	// credentials, having built nothing.
	bin := goBuild(t, "testdata/hello", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var out, progress bytes.Buffer
	d := &Deployer{Config: &AWSConfig{
		Stack: "demo", Region: "eu-west-1", Spec: mustSpec(t, "npx:pkg@1.0.0"), BridgeBinary: bin, AllowHTTP: true,
	}, Out: &out, Progress: &progress, Env: isolatedAWSEnv(t)}
	err := d.Run(t.Context())
	if !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("Run = %v; want ErrNoCredentials", err)
	}
	for _, want := range []string{"Check the bridge binary", "Connect to the Docker Engine", "Find the AWS account"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if strings.Contains(progress.String(), "Build the image") || out.Len() != 0 {
		t.Errorf("went past the failed step:\n%s\n%s", progress.String(), out.String())
	}
}

// Complete keeps the ECS task counts' flag defaults only where they mean
// something: an AgentCore runtime refuses counts that were given, and
// ignores those that were not; a delete has none.
func TestComplete(t *testing.T) {
	const role = "arn:aws:iam::123456789012:role/r"
	ecsDefaults := func(c AWSConfig) *AWSConfig { c.DesiredCount, c.MinTasks, c.MaxTasks = 2, 1, 4; return &c }
	for _, c := range []struct {
		name   string
		c      *AWSConfig
		given  map[string]bool
		from   string
		counts [3]int
		err    string
	}{
		{"no stack", ecsDefaults(AWSConfig{Image: "x:1", AllowHTTP: true}), nil, "", [3]int{2, 1, 4}, "--stack is required"},
		{"ecs", ecsDefaults(AWSConfig{Stack: "s", Image: "x:1", AllowHTTP: true}), nil, "", [3]int{2, 1, 4}, ""},
		{"ecs delete", ecsDefaults(AWSConfig{Stack: "s", Delete: true}), map[string]bool{"desired-count": true}, "", [3]int{}, ""},
		{"agentcore", ecsDefaults(AWSConfig{Target: TargetAgentCore, Stack: "s", Image: "x:1", RoleArn: role}), nil, "", [3]int{}, ""},
		{"agentcore given", ecsDefaults(AWSConfig{Target: TargetAgentCore, Stack: "s", Image: "x:1", RoleArn: role}),
			map[string]bool{"max-tasks": true}, "", [3]int{0, 0, 4}, "--max-tasks applies to --target ecs only"},
		{"bad spec", ecsDefaults(AWSConfig{Stack: "s", AllowHTTP: true}), nil, "npx:pkg", [3]int{2, 1, 4}, "bad package spec"},
	} {
		_, err := c.c.Complete(c.given, c.from, "", true)
		if got := [3]int{c.c.DesiredCount, c.c.MinTasks, c.c.MaxTasks}; got != c.counts {
			t.Errorf("%s: counts %v, want %v", c.name, got, c.counts)
		}
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
	c := &AWSConfig{Stack: "s", AllowHTTP: true}
	if _, err := c.Complete(nil, "npx:pkg@1.0.0", "", true); err != nil || c.Spec == nil || c.Spec.Package != "pkg" || c.BridgeBinary != "<this executable>" {
		t.Errorf("from a spec: %v, spec %+v, binary %q", err, c.Spec, c.BridgeBinary)
	}
}
