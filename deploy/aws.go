package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/registry"

	"github.com/mcp-bridge/mcp-bridge/cloudformation"
)

// Errors a caller may branch on; each is wrapped with what to do next.
var (
	ErrNoAWSCLI      = errors.New("the aws CLI is not installed")
	ErrNoRegion      = errors.New("no AWS region")
	ErrNoCredentials = errors.New("no usable AWS credentials")
	ErrAWS           = errors.New("aws CLI")
	ErrConfig        = errors.New("bad deploy configuration")
)

// AWSConfig describes one `bridge deploy aws` run.
type AWSConfig struct {
	// Target is TargetECS (empty means it) or TargetAgentCore.
	Target string
	// Stack names the CloudFormation stack; it also names the ECR
	// repository, "mcp-bridge/<stack in lowercase>".
	Stack string
	// Region; empty means AWS_REGION, then AWS_DEFAULT_REGION, then the
	// aws CLI's configured region.
	Region string
	// Image is an image to deploy as it is (its entrypoint must be the
	// bridge). Exactly one of Image and Spec is set unless Delete.
	Image string
	// Spec is a package to build an image from, with BridgeBinary.
	Spec *Spec
	// BridgeBinary is the bridge executable to put in a built image.
	BridgeBinary string
	// Arch is the CPU architecture of Image ("amd64" or "arm64"); empty
	// means amd64. A built image takes the bridge binary's.
	Arch string
	// Command, if set, replaces the image's server command (what the
	// bridge runs after "--").
	Command []string
	// CertificateArn enables HTTPS. Without it AllowHTTP must be set.
	CertificateArn string
	AllowHTTP      bool
	// DomainName and HostedZoneID name the endpoint (optional).
	DomainName   string
	HostedZoneID string
	// AuthSecretArn is an existing Secrets Manager secret with the bearer
	// tokens; empty lets the stack create one.
	AuthSecretArn string
	// DesiredCount, MinTasks and MaxTasks size the service; zero means 2,
	// 1 and 4.
	DesiredCount, MinTasks, MaxTasks int
	// Parameters sets any other template parameter. Parameters neither set
	// here nor by the fields above keep their previous value on an update.
	Parameters map[string]string
	// Delete removes the stack (the runtime) instead.
	Delete bool

	// For TargetAgentCore only. Stack names the runtime.
	//
	// RoleArn is the IAM role the runtime runs as (required).
	RoleArn string
	// JWTDiscoveryURL, if set, makes AgentCore accept bearer JWTs of this
	// OpenID Connect issuer, for JWTAllowedClients (client_id claims) or
	// JWTAllowedAudience; empty means IAM SigV4, AgentCore's default.
	JWTDiscoveryURL                       string
	JWTAllowedClients, JWTAllowedAudience []string
}

var stackName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,127}$`)

// managed are the parameters the fields of AWSConfig set.
var managed = []string{
	cloudformation.ParamImage, cloudformation.ParamServerCommand, cloudformation.ParamCpuArchitecture,
	cloudformation.ParamCertificateArn, cloudformation.ParamDomainName, cloudformation.ParamHostedZoneID,
	cloudformation.ParamAuthTokenSecretArn, cloudformation.ParamDesiredCount, cloudformation.ParamMinTasks,
	cloudformation.ParamMaxTasks,
}

// Check reports the first configuration error, before anything runs.
func (c *AWSConfig) Check() error {
	switch c.Target {
	case "", TargetECS:
	case TargetAgentCore:
		return c.checkAgentCore()
	default:
		return fmt.Errorf("%w: --target %q: want %s or %s", ErrConfig, c.Target, TargetECS, TargetAgentCore)
	}
	if c.RoleArn != "" || c.JWTDiscoveryURL != "" || len(c.JWTAllowedClients) > 0 || len(c.JWTAllowedAudience) > 0 {
		return fmt.Errorf("%w: --role-arn and the --jwt-* flags apply to --target %s only", ErrConfig, TargetAgentCore)
	}
	if !stackName.MatchString(c.Stack) {
		return fmt.Errorf("%w: the stack name %q must start with a letter and hold only letters, digits and dashes (128 at most)", ErrConfig, c.Stack)
	}
	if c.Delete {
		if c.Image != "" || c.Spec != nil || len(c.Command) > 0 {
			return fmt.Errorf("%w: --delete takes no image, spec or command", ErrConfig)
		}
		return nil
	}
	if (c.Image == "") == (c.Spec == nil) {
		return fmt.Errorf("%w: give exactly one of --image IMAGE (deploy it as is) and --from SPEC (build one)", ErrConfig)
	}
	if c.Spec != nil && c.BridgeBinary == "" {
		return fmt.Errorf("%w: building an image needs the bridge binary (--bridge-binary)", ErrConfig)
	}
	if c.Spec == nil && c.Arch != "" && c.Arch != "amd64" && c.Arch != "arm64" {
		return fmt.Errorf("%w: --arch %q: want amd64 or arm64", ErrConfig, c.Arch)
	}
	for _, a := range c.Command {
		if strings.Contains(a, ",") {
			return fmt.Errorf("%w: the server argument %q holds a comma, which the template's ServerCommand list cannot carry; build an image with the command instead (--from SPEC -- COMMAND ...) or wrap it in a script", ErrConfig, a)
		}
	}
	if c.CertificateArn == "" && !c.AllowHTTP {
		return fmt.Errorf("%w: without --certificate-arn the load balancer serves plain HTTP and bearer tokens cross the network in clear; give an ACM certificate ARN, or --allow-http for a test deployment", ErrConfig)
	}
	if c.HostedZoneID != "" && c.DomainName == "" {
		return fmt.Errorf("%w: --hosted-zone-id needs --domain", ErrConfig)
	}
	d, lo, hi := c.counts()
	if lo < 1 || lo > hi || d < lo || d > hi {
		return fmt.Errorf("%w: want 1 <= --min-tasks (%d) <= --desired-count (%d) <= --max-tasks (%d)", ErrConfig, lo, d, hi)
	}
	names, err := cloudformation.ParameterNames()
	if err != nil {
		return err
	}
	for k := range c.Parameters {
		if slices.Contains(managed, k) {
			return fmt.Errorf("%w: --parameter %s: set it with its own flag", ErrConfig, k)
		}
		if !slices.Contains(names, k) {
			return fmt.Errorf("%w: --parameter %s: the template has no such parameter (it has %s)", ErrConfig, k, strings.Join(names, ", "))
		}
	}
	return nil
}

// Complete finishes a configuration that a command line filled in (bridge
// deploy aws) and checks it (Check). given holds the names of the flags
// given: the ECS task counts have the flags' defaults (2, 1 and 4), which
// a delete does not use and an AgentCore runtime does not have (given
// explicitly, Check refuses them rather than ignore them). from is a
// package spec to build an image from (ParseSpec), with the bridge
// executable bridgeBinary; note is what a dry run says of it
// (SetBridgeBinary).
func (c *AWSConfig) Complete(given map[string]bool, from, bridgeBinary string, dryRun bool) (note string, err error) {
	if c.Stack == "" {
		return "", errors.New("--stack is required")
	}
	if c.Target == TargetAgentCore {
		if !given["desired-count"] {
			c.DesiredCount = 0
		}
		if !given["min-tasks"] {
			c.MinTasks = 0
		}
		if !given["max-tasks"] {
			c.MaxTasks = 0
		}
	}
	if from != "" {
		if c.Spec, err = ParseSpec(from); err != nil {
			return "", err
		}
		if note, err = c.SetBridgeBinary(bridgeBinary, dryRun); err != nil {
			return "", err
		}
	}
	if c.Delete && c.Target != TargetAgentCore {
		c.DesiredCount, c.MinTasks, c.MaxTasks = 0, 0, 0
	}
	return note, c.Check()
}

func (c *AWSConfig) counts() (desired, lo, hi int) {
	desired, lo, hi = c.DesiredCount, c.MinTasks, c.MaxTasks
	if desired == 0 {
		desired = 2
	}
	if lo == 0 {
		lo = 1
	}
	if hi == 0 {
		hi = 4
	}
	return desired, lo, hi
}

// Repository is the ECR repository a built image is pushed to.
func (c *AWSConfig) Repository() string { return "mcp-bridge/" + sanitize(c.Stack) }

// A Deployer carries out an AWSConfig with the aws CLI and the Docker
// Engine API.
type Deployer struct {
	Config *AWSConfig
	// Out receives, at the end, the endpoint and a client configuration.
	Out io.Writer
	// Progress receives each step as it starts and the output of long
	// commands (build, push, stack waits); nil means Out.
	Progress io.Writer
	// AWSCLI is the aws executable; empty means "aws" looked up on PATH.
	AWSCLI string
	// Env is the aws CLI's environment; nil means this process's.
	Env []string
}

// state is what the steps learn and pass on. In a dry run it holds
// placeholders that say where each value would come from.
type state struct {
	awsPath    string
	region     string
	account    string
	binary     *Binary
	dockerfile []byte
	context    []byte
	imageRef   string
	engine     *Engine
	password   string // ECR login; never printed
	template   string // path of the template file handed to the CLI
	outputs    map[string]string
	runtimeID  string // AgentCore
	runtimeArn string
}

// A step is one thing the deploy does. Exactly one of argv and action
// describes it; run does it.
type step struct {
	title  string
	argv   func(s *state) []string // an aws CLI command, shown as is
	alt    func(s *state) []string // shown as "if that fails with ...: <alt>"
	altIf  string
	action func(s *state) string // an in-process action, described
	run    func(ctx context.Context, d *Deployer, s *state) error
}

func (d *Deployer) steps() []step {
	c := d.Config
	var steps []step
	steps = append(steps, step{
		title:  "Find the aws CLI",
		action: func(*state) string { return "look up \"aws\" on PATH" },
		run: func(_ context.Context, d *Deployer, s *state) error {
			p := d.AWSCLI
			if p == "" {
				p = "aws"
			}
			found, err := exec.LookPath(p)
			if err != nil {
				return fmt.Errorf("%w (%v): install AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html) and make sure it is on PATH", ErrNoAWSCLI, err)
			}
			s.awsPath = found
			return nil
		},
	})
	steps = append(steps, step{
		title: "Choose the region",
		action: func(*state) string {
			return "--region, else AWS_REGION, else AWS_DEFAULT_REGION, else `aws configure get region`"
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			if s.region != "" {
				return nil
			}
			out, err := d.aws(ctx, s, false, "configure", "get", "region")
			if r := strings.TrimSpace(string(out)); err == nil && r != "" {
				s.region = r
				return nil
			}
			return fmt.Errorf("%w: pass --region, set AWS_REGION, or run `aws configure set region eu-west-1`", ErrNoRegion)
		},
	})
	if c.Delete {
		if c.Target == TargetAgentCore {
			return append(steps, d.agentCoreDeleteSteps()...)
		}
		return append(steps, d.deleteSteps()...)
	}
	if c.Spec != nil {
		steps = append(steps, step{
			title: "Check the bridge binary and render the build context",
			action: func(*state) string {
				archs := "amd64 or arm64"
				if c.Target == TargetAgentCore {
					archs = AgentCoreArch
				}
				return fmt.Sprintf("read %s (a static Linux %s executable); the build context is a tar of it and the Dockerfile; the image tag is %s-<first 12 hex digits of the context's SHA-256>", c.BridgeBinary, archs, c.Spec.ImageTag())
			},
			run: func(_ context.Context, d *Deployer, s *state) error {
				b, err := ReadBinary(c.BridgeBinary)
				if err != nil {
					return err
				}
				if err := c.checkBinaryArch(b); err != nil {
					return err
				}
				s.binary = b
				if s.context, err = BuildContext(s.dockerfile, b.Data); err != nil {
					return err
				}
				return nil
			},
		})
		steps = append(steps, step{
			title:  "Connect to the Docker Engine",
			action: func(*state) string { return "GET /_ping on DOCKER_HOST (default unix:///var/run/docker.sock)" },
			run: func(ctx context.Context, d *Deployer, s *state) error {
				e, err := NewEngine(ctx)
				s.engine = e
				return err
			},
		})
	}
	steps = append(steps, step{
		title: "Find the AWS account of the current credentials",
		argv: func(s *state) []string {
			return []string{"aws", "sts", "get-caller-identity", "--region", s.region, "--query", "Account", "--output", "text"}
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			out, err := d.aws(ctx, s, false, "sts", "get-caller-identity", "--region", s.region, "--query", "Account", "--output", "text")
			if err != nil {
				return err
			}
			s.account = strings.TrimSpace(string(out))
			if s.account == "" {
				return fmt.Errorf("%w: sts get-caller-identity returned no account", ErrAWS)
			}
			return nil
		},
	})
	if c.Spec != nil {
		steps = append(steps, d.imageSteps()...)
	}
	if c.Target == TargetAgentCore {
		return append(steps, d.agentCoreSteps()...)
	}
	steps = append(steps, d.stackSteps()...)
	return steps
}

func (s *state) registry() string {
	return s.account + ".dkr.ecr." + s.region + ".amazonaws.com"
}

func (d *Deployer) imageSteps() []step {
	c := d.Config
	repo := c.Repository()
	return []step{{
		title: "Build the image through the Docker Engine API",
		action: func(s *state) string {
			return fmt.Sprintf("POST /build (classic builder, platform linux/<binary's arch>) with the build context; tag %s", s.imageRef)
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			id, err := s.engine.Build(ctx, s.context, []string{s.imageRef}, s.binary.Arch, d.progress())
			if err != nil {
				return err
			}
			fmt.Fprintf(d.progress(), "built %s as %s\n", id, s.imageRef)
			return nil
		},
	}, {
		title: "Find or create the ECR repository",
		argv: func(s *state) []string {
			return []string{"aws", "ecr", "describe-repositories", "--region", s.region, "--repository-names", repo}
		},
		altIf: "RepositoryNotFoundException",
		alt: func(s *state) []string {
			return []string{"aws", "ecr", "create-repository", "--region", s.region, "--repository-name", repo,
				"--image-scanning-configuration", "scanOnPush=true", "--tags", "Key=mcp-bridge:stack,Value=" + c.Stack}
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			_, err := d.aws(ctx, s, false, "ecr", "describe-repositories", "--region", s.region, "--repository-names", repo)
			if err == nil {
				return nil
			}
			if !strings.Contains(err.Error(), "RepositoryNotFoundException") {
				return err
			}
			fmt.Fprintf(d.progress(), "creating the ECR repository %s\n", repo)
			_, err = d.aws(ctx, s, false, "ecr", "create-repository", "--region", s.region, "--repository-name", repo,
				"--image-scanning-configuration", "scanOnPush=true", "--tags", "Key=mcp-bridge:stack,Value="+c.Stack)
			return err
		},
	}, {
		title: "Get a registry password for ECR (kept in memory, never printed)",
		argv: func(s *state) []string {
			return []string{"aws", "ecr", "get-login-password", "--region", s.region}
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			out, err := d.aws(ctx, s, false, "ecr", "get-login-password", "--region", s.region)
			if err != nil {
				return err
			}
			s.password = strings.TrimSpace(string(out))
			return nil
		},
	}, {
		title: "Push the image through the Docker Engine API",
		action: func(s *state) string {
			return fmt.Sprintf("POST /images/%s/push with X-Registry-Auth for %s (user AWS)", s.imageRef, s.registry())
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			return s.engine.Push(ctx, s.imageRef, registry.AuthConfig{
				Username: "AWS", Password: s.password, ServerAddress: s.registry(),
			}, d.progress())
		},
	}}
}

// parameters returns the parameter overrides for the stack, in template
// order, given the image to run and its architecture ("amd64", "arm64").
func (c *AWSConfig) parameters(image, arch string) []string {
	cpu := "X86_64"
	if arch == "arm64" {
		cpu = "ARM64"
	}
	cmd := ""
	if c.Spec == nil && len(c.Command) > 0 {
		// A built image has the command in its CMD already.
		cmd = "--," + strings.Join(c.Command, ",")
	}
	desired, lo, hi := c.counts()
	set := map[string]string{
		cloudformation.ParamImage:              image,
		cloudformation.ParamServerCommand:      cmd,
		cloudformation.ParamCpuArchitecture:    cpu,
		cloudformation.ParamCertificateArn:     c.CertificateArn,
		cloudformation.ParamDomainName:         c.DomainName,
		cloudformation.ParamHostedZoneID:       c.HostedZoneID,
		cloudformation.ParamAuthTokenSecretArn: c.AuthSecretArn,
		cloudformation.ParamDesiredCount:       fmt.Sprint(desired),
		cloudformation.ParamMinTasks:           fmt.Sprint(lo),
		cloudformation.ParamMaxTasks:           fmt.Sprint(hi),
	}
	for k, v := range c.Parameters {
		set[k] = v
	}
	names, _ := cloudformation.ParameterNames()
	var out []string
	for _, n := range names {
		if v, ok := set[n]; ok {
			out = append(out, n+"="+v)
		}
	}
	return out
}

func (d *Deployer) deployArgv(s *state) []string {
	c := d.Config
	arch := c.Arch
	if s.binary != nil {
		arch = s.binary.Arch
	}
	image := c.Image
	if c.Spec != nil {
		image = s.imageRef
	}
	argv := []string{"aws", "cloudformation", "deploy", "--region", s.region, "--stack-name", c.Stack,
		"--template-file", s.template, "--capabilities", "CAPABILITY_IAM", "--no-fail-on-empty-changeset",
		"--tags", "mcp-bridge:stack=" + c.Stack, "--parameter-overrides"}
	return append(argv, c.parameters(image, arch)...)
}

func (d *Deployer) stackSteps() []step {
	c := d.Config
	return []step{{
		title: "Write the template to a temporary file",
		action: func(s *state) string {
			return fmt.Sprintf("write the CloudFormation template (cloudformation/bridge.yaml, built in) to %s", s.template)
		},
		run: func(_ context.Context, d *Deployer, s *state) error {
			f, err := os.CreateTemp("", "mcp-bridge-*.yaml")
			if err != nil {
				return fmt.Errorf("writing the template: %w", err)
			}
			defer f.Close()
			if _, err := f.Write(cloudformation.Template); err != nil {
				return fmt.Errorf("writing the template: %w", err)
			}
			s.template = f.Name()
			return nil
		},
	}, {
		title: "Create or update the stack and wait for it (ECS waits for the tasks to be healthy)",
		argv:  d.deployArgv,
		altIf: "a failure",
		alt: func(s *state) []string {
			return []string{"aws", "cloudformation", "describe-stack-events", "--region", s.region, "--stack-name", c.Stack, "--max-items", "30", "--output", "json"}
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			defer os.Remove(s.template)
			argv := d.deployArgv(s)
			if _, err := d.aws(ctx, s, true, argv[1:]...); err != nil {
				if reasons := d.failureReasons(ctx, s); reasons != "" {
					return fmt.Errorf("%w\nfailed resources:\n%s", err, reasons)
				}
				return err
			}
			return nil
		},
	}, {
		title: "Read the stack's outputs",
		argv: func(s *state) []string {
			return []string{"aws", "cloudformation", "describe-stacks", "--region", s.region, "--stack-name", c.Stack, "--query", "Stacks[0].Outputs", "--output", "json"}
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			out, err := d.aws(ctx, s, false, "cloudformation", "describe-stacks", "--region", s.region, "--stack-name", c.Stack, "--query", "Stacks[0].Outputs", "--output", "json")
			if err != nil {
				return err
			}
			var outs []struct{ OutputKey, OutputValue string }
			if err := json.Unmarshal(out, &outs); err != nil {
				return fmt.Errorf("%w: describe-stacks output is not the expected JSON: %v", ErrAWS, err)
			}
			s.outputs = map[string]string{}
			for _, o := range outs {
				s.outputs[o.OutputKey] = o.OutputValue
			}
			if s.outputs[cloudformation.OutputEndpoint] == "" {
				return fmt.Errorf("%w: the stack has no %s output", ErrAWS, cloudformation.OutputEndpoint)
			}
			return nil
		},
	}}
}

func (d *Deployer) deleteSteps() []step {
	c := d.Config
	return []step{{
		title: "Delete the stack",
		argv: func(s *state) []string {
			return []string{"aws", "cloudformation", "delete-stack", "--region", s.region, "--stack-name", c.Stack}
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			_, err := d.aws(ctx, s, false, "cloudformation", "delete-stack", "--region", s.region, "--stack-name", c.Stack)
			return err
		},
	}, {
		title: "Wait until it is gone",
		argv: func(s *state) []string {
			return []string{"aws", "cloudformation", "wait", "stack-delete-complete", "--region", s.region, "--stack-name", c.Stack}
		},
		run: func(ctx context.Context, d *Deployer, s *state) error {
			_, err := d.aws(ctx, s, true, "cloudformation", "wait", "stack-delete-complete", "--region", s.region, "--stack-name", c.Stack)
			return err
		},
	}}
}

// failureReasons lists the failed resources of the stack's last events,
// best effort.
func (d *Deployer) failureReasons(ctx context.Context, s *state) string {
	out, err := d.aws(ctx, s, false, "cloudformation", "describe-stack-events", "--region", s.region, "--stack-name", d.Config.Stack, "--max-items", "30", "--output", "json")
	if err != nil {
		return ""
	}
	var ev struct {
		StackEvents []struct{ LogicalResourceId, ResourceStatus, ResourceStatusReason string }
	}
	if json.Unmarshal(out, &ev) != nil {
		return ""
	}
	var b strings.Builder
	for _, e := range ev.StackEvents {
		if strings.HasSuffix(e.ResourceStatus, "_FAILED") && e.ResourceStatusReason != "" {
			fmt.Fprintf(&b, "  %s: %s\n", e.LogicalResourceId, e.ResourceStatusReason)
		}
	}
	return b.String()
}

// aws runs the aws CLI. With stream, its output also goes to Out as it
// comes (long waits show progress).
func (d *Deployer) aws(ctx context.Context, s *state, stream bool, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.awsPath, args...)
	env := d.Env
	if env == nil {
		env = os.Environ()
	}
	// AWS CLI v2 pipes output through a pager by default; nobody reads it.
	cmd.Env = append(slices.Clone(env), "AWS_PAGER=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stream {
		cmd.Stdout = io.MultiWriter(&stdout, d.progress())
		cmd.Stderr = io.MultiWriter(&stderr, d.progress())
	}
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		msg = strings.TrimSpace(stdout.String())
	}
	what := "aws " + strings.Join(args[:min(2, len(args))], " ")
	switch {
	case strings.Contains(msg, "Unable to locate credentials"), strings.Contains(msg, "NoCredentialProviders"),
		strings.Contains(msg, "InvalidClientTokenId"), strings.Contains(msg, "The SSO session"):
		return nil, fmt.Errorf("%w (%s: %s): configure them with `aws configure`, AWS_PROFILE, or `aws sso login`", ErrNoCredentials, what, msg)
	case strings.Contains(msg, "ExpiredToken"), strings.Contains(msg, "RequestExpired"):
		return nil, fmt.Errorf("%w (%s: %s): the credentials have expired; refresh them (`aws sso login`, or new keys)", ErrNoCredentials, what, msg)
	case strings.Contains(msg, "You must specify a region"):
		return nil, fmt.Errorf("%w (%s: %s): pass --region or set AWS_REGION", ErrNoRegion, what, msg)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: %s was interrupted: %v; anything CloudFormation started goes on in AWS (see the console)", ErrAWS, what, ctx.Err())
	}
	return nil, fmt.Errorf("%w: %s failed (%v): %s", ErrAWS, what, err, msg)
}

func (d *Deployer) progress() io.Writer {
	if d.Progress != nil {
		return d.Progress
	}
	return d.Out
}

// placeholders fills a state for a dry run: every value a real run would
// learn is named by where it comes from.
func (d *Deployer) placeholders() *state {
	c := d.Config
	s := &state{
		region:   c.Region,
		account:  "<account-id>",
		template: "<temporary file>",
	}
	if s.region == "" {
		s.region = "<region>"
	}
	if c.Spec != nil {
		s.imageRef = fmt.Sprintf("%s/%s:%s-<content-hash>", s.registry(), c.Repository(), c.Spec.ImageTag())
		s.binary = &Binary{Arch: "<binary's arch>"}
	}
	return s
}

// DryRun writes what Run would do: the Dockerfile, the template, and each
// step with the exact aws command lines. It runs nothing and makes no
// network call.
func (d *Deployer) DryRun(w io.Writer) error {
	c := d.Config
	if err := c.Check(); err != nil {
		return err
	}
	s := d.placeholders()
	if c.Spec != nil {
		df, err := RenderDockerfile(c.Spec, c.Command)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "# Dockerfile (build context: this file and %s as %q)\n\n%s\n", c.BridgeBinary, BridgeFile, df)
	}
	switch {
	case c.Delete:
	case c.Target == TargetAgentCore:
		d.agentCoreRequestText(w, s)
	default:
		fmt.Fprintf(w, "# CloudFormation template\n\n%s\n", cloudformation.Template)
	}
	fmt.Fprintf(w, "# Steps (dry run: none of them was run)\n\n")
	for i, st := range d.steps() {
		fmt.Fprintf(w, "%d. %s\n", i+1, st.title)
		if st.argv != nil {
			fmt.Fprintf(w, "   $ %s\n", shellJoin(st.argv(s)))
		} else {
			fmt.Fprintf(w, "   %s\n", st.action(s))
		}
		if st.alt != nil {
			fmt.Fprintf(w, "   on %s:\n   $ %s\n", st.altIf, shellJoin(st.alt(s)))
		}
	}
	fmt.Fprintln(w)
	switch {
	case c.Delete:
		d.deleteNote(w, s)
	case c.Target == TargetAgentCore:
		s.runtimeID = "<runtime-id>"
		s.runtimeArn = "<agentRuntimeArn returned by the create or update>"
		fmt.Fprintf(w, "# Then it prints\n\n")
		d.agentCoreResult(w, s)
	default:
		s.outputs = map[string]string{
			cloudformation.OutputEndpoint:      "<" + cloudformation.OutputEndpoint + " output>",
			cloudformation.OutputAuthSecretArn: "<" + cloudformation.OutputAuthSecretArn + " output>",
			cloudformation.OutputLogGroup:      "<" + cloudformation.OutputLogGroup + " output>",
		}
		fmt.Fprintf(w, "# Then it prints\n\n")
		d.result(w, s)
	}
	return nil
}

// Run deploys (or deletes) the stack, printing each step to Out.
func (d *Deployer) Run(ctx context.Context) error {
	c := d.Config
	if err := c.Check(); err != nil {
		return err
	}
	s := &state{region: c.Region}
	if s.region == "" {
		s.region = os.Getenv("AWS_REGION")
	}
	if s.region == "" {
		s.region = os.Getenv("AWS_DEFAULT_REGION")
	}
	if c.Spec != nil {
		df, err := RenderDockerfile(c.Spec, c.Command)
		if err != nil {
			return err
		}
		s.dockerfile = df
	}
	defer func() {
		if s.engine != nil {
			s.engine.Close()
		}
	}()
	steps := d.steps()
	for i, st := range steps {
		// The image reference is known once the account and the content
		// are: set it before the first step that shows it.
		if c.Spec != nil && s.imageRef == "" && s.account != "" && s.context != nil {
			s.imageRef = fmt.Sprintf("%s/%s:%s-%s", s.registry(), c.Repository(), c.Spec.ImageTag(), ContentTag(s.context))
		}
		fmt.Fprintf(d.progress(), "==> [%d/%d] %s\n", i+1, len(steps), st.title)
		if err := st.run(ctx, d, s); err != nil {
			return fmt.Errorf("step %d/%d (%s): %w", i+1, len(steps), st.title, err)
		}
	}
	switch {
	case c.Delete:
		d.deleteNote(d.Out, s)
	case c.Target == TargetAgentCore:
		d.agentCoreResult(d.Out, s)
	default:
		d.result(d.Out, s)
	}
	return nil
}

func (d *Deployer) deleteNote(w io.Writer, s *state) {
	c := d.Config
	fmt.Fprintf(w, "The ECR repository %s (if `bridge deploy aws --from` made one) is kept, with its images. To remove it:\n  $ %s\n",
		c.Repository(), shellJoin([]string{"aws", "ecr", "delete-repository", "--region", s.region, "--repository-name", c.Repository(), "--force"}))
}

// result prints the endpoint and a client configuration to paste.
func (d *Deployer) result(w io.Writer, s *state) {
	c := d.Config
	url := s.outputs[cloudformation.OutputEndpoint]
	type server struct {
		Type    string            `json:"type"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	cfg := map[string]map[string]server{"mcpServers": {c.Stack: {
		Type:    "http",
		URL:     url,
		Headers: map[string]string{"Authorization": "Bearer ${MCP_BRIDGE_TOKEN}"},
	}}}
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(cfg)
	secret := s.outputs[cloudformation.OutputAuthSecretArn]
	fmt.Fprintf(w, "MCP endpoint: %s\n\n", url)
	fmt.Fprintf(w, "Client configuration (.mcp.json format; ${MCP_BRIDGE_TOKEN} is read from the environment):\n%s\n", js.String())
	fmt.Fprintf(w, "The bearer token is in Secrets Manager, not in the image or the template. Export it before starting the client:\n")
	fmt.Fprintf(w, "  $ export MCP_BRIDGE_TOKEN=\"$(%s)\"\n\n", shellJoin([]string{"aws", "secretsmanager", "get-secret-value", "--region", s.region, "--secret-id", secret, "--query", "SecretString", "--output", "text"}))
	fmt.Fprintf(w, "Or add it to Claude Code:\n  $ claude mcp add --transport http %s %s --header \"Authorization: Bearer $MCP_BRIDGE_TOKEN\"\n\n", shellQuote(c.Stack), shellQuote(url))
	fmt.Fprintf(w, "Logs:\n  $ %s\n", shellJoin([]string{"aws", "logs", "tail", "--region", s.region, "--follow", s.outputs[cloudformation.OutputLogGroup]}))
}

// shellJoin quotes argv for a POSIX shell, so that printed commands can be
// pasted.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
