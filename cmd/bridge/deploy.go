package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcp-bridge/mcp-bridge/deploy"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
)

const deployUsage = `Usage:
  bridge deploy aws --stack NAME [--region R] (--image IMAGE | --from SPEC) [flags] [-- COMMAND ARGS...]
  bridge deploy aws --stack NAME [--region R] --delete
  bridge deploy aws --target agentcore --stack NAME --role-arn ARN (--image IMAGE | --from SPEC) [flags] [-- COMMAND ARGS...]

Deploys the bridge to Amazon ECS (Fargate) behind an Application Load
Balancer with the template of cloudformation/bridge.yaml: with --from, builds
an image bundling the bridge and the server (see bridge image build), pushes
it to ECR (creating the repository mcp-bridge/NAME if needed), then creates
or updates the stack, waits for it, and prints the MCP URL and a client
configuration. Needs the aws CLI with credentials, and for --from the Docker
Engine. --dry-run prints the Dockerfile, the template and every step, and
runs none of them. -- COMMAND ARGS... replaces the image's server command.

Template parameters not set by a flag keep their previous value on an
update (or the template's default).

With --target agentcore, deploys to an Amazon Bedrock AgentCore Runtime
(protocol MCP) named NAME instead: the image (ARM64; with --from, pushed to
ECR as above) serves MCP on port 8000 at /mcp, AgentCore authenticates the
callers (IAM SigV4, or JWTs with --jwt-discovery-url) and runs a microVM per
session. The ECS flags (--certificate-arn ... --parameter) do not apply.

Flags:
`

// runDeploy implements `bridge deploy ...`; args follow "deploy".
func runDeploy(args []string, stdout, stderr io.Writer) int {
	cmd := &flagx.Subcommand{Noun: "bridge deploy", Verb: "aws", What: "target", Usage: deployUsage, Unknown: unknownFlag}
	f, command, code, ok := flagx.ParseSubcommand(cmd, args, stdout, stderr, newDeployFlags)
	if !ok {
		return code
	}
	f.Command = command
	note, err := f.Complete(flagx.Given(f.fs), f.from, f.bridgeBinary, f.dryRun)
	if err != nil {
		fmt.Fprintf(stderr, "bridge deploy aws: %v\n", err)
		return 2
	}
	d := &deploy.Deployer{Config: &f.AWSConfig, Out: stdout, Progress: stderr}
	if f.dryRun {
		if note != "" {
			fmt.Fprintf(stderr, "bridge deploy aws: note: %s\n", note)
		}
		if err := d.DryRun(stdout); err != nil {
			fmt.Fprintf(stderr, "bridge deploy aws: %v\n", err)
			return 2
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "bridge deploy aws: %v\n", err)
		if errors.Is(err, deploy.ErrConfig) {
			return 2
		}
		return 1
	}
	return 0
}

// deployFlags binds the flags into the deployment's own configuration;
// what is left beside it is what the command does with them.
type deployFlags struct {
	deploy.AWSConfig
	from, bridgeBinary string // read into Spec and BridgeBinary by Complete
	dryRun             bool
	fs                 *flag.FlagSet // to tell given flags from defaults
}

func newDeployFlags(out io.Writer, f *deployFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("bridge deploy aws", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.Target, "target", deploy.TargetECS, "`where` to deploy: ecs (the CloudFormation stack: ECS Fargate behind a load balancer) or agentcore (a Bedrock AgentCore Runtime)")
	fs.StringVar(&f.Stack, "stack", "", "CloudFormation stack `name`, or with --target agentcore the runtime's name (also names the ECR repository mcp-bridge/<name>)")
	fs.StringVar(&f.Region, "region", "", "AWS `region` (default: AWS_REGION, AWS_DEFAULT_REGION, then the aws CLI's configured region)")
	fs.StringVar(&f.Image, "image", "", "deploy this `image` as is; its entrypoint must be the bridge")
	fs.StringVar(&f.from, "from", "", "build an image bundling the server of this pinned package `SPEC` (npx:, uvx: or go:) and push it to ECR")
	fs.StringVar(&f.bridgeBinary, "bridge-binary", "", "with --from: bridge executable to put in the image, static Linux amd64 or arm64 (default: this executable)")
	fs.StringVar(&f.Arch, "arch", "", "with --image: its CPU `architecture`, amd64 (default) or arm64")
	fs.StringVar(&f.CertificateArn, "certificate-arn", "", "ACM certificate `ARN`: serve HTTPS on 443")
	fs.BoolVar(&f.AllowHTTP, "allow-http", false, "without --certificate-arn, accept serving plain HTTP on 80 (tokens cross the network in clear; for tests)")
	fs.StringVar(&f.DomainName, "domain", "", "`name` clients use, matching the certificate (default: the load balancer's DNS name)")
	fs.StringVar(&f.HostedZoneID, "hosted-zone-id", "", "Route 53 hosted zone `ID` in which to create --domain as an alias of the load balancer")
	fs.StringVar(&f.AuthSecretArn, "auth-secret-arn", "", "existing Secrets Manager secret `ARN` holding the bearer tokens, comma-separated (default: the stack creates one with a random token)")
	fs.IntVar(&f.DesiredCount, "desired-count", 2, "tasks to run")
	fs.IntVar(&f.MinTasks, "min-tasks", 1, "fewest tasks autoscaling keeps")
	fs.IntVar(&f.MaxTasks, "max-tasks", 4, "most tasks autoscaling starts")
	fs.Var(&flagx.Pairs{Dst: &f.Parameters, Form: "KEY=VALUE"}, "parameter", "set another template parameter, `KEY=VALUE` (repeatable), e.g. TaskCpu=1024")
	fs.StringVar(&f.RoleArn, "role-arn", "", "with --target agentcore: the IAM role `ARN` the runtime runs as (trusted by bedrock-agentcore.amazonaws.com, allowed to pull the image and write logs)")
	fs.StringVar(&f.JWTDiscoveryURL, "jwt-discovery-url", "", "with --target agentcore: accept bearer JWTs of this OpenID Connect issuer (its discovery document `URL`) instead of IAM SigV4")
	fs.Var(&flagx.List{Dst: &f.JWTAllowedClients}, "jwt-allowed-clients", "with --jwt-discovery-url: the client IDs whose tokens are accepted, comma-separated")
	fs.Var(&flagx.List{Dst: &f.JWTAllowedAudience}, "jwt-allowed-audience", "with --jwt-discovery-url: the audiences whose tokens are accepted, comma-separated")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print the Dockerfile, the template and every step; run nothing, call nothing")
	fs.BoolVar(&f.Delete, "delete", false, "delete the stack (the ECR repository is kept)")
	fs.Usage = func() {
		fmt.Fprint(out, deployUsage)
		fs.PrintDefaults()
	}
	f.fs = fs
	return fs
}
