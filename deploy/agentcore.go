package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/cloudformation"
)

// Targets of `bridge deploy aws`.
const (
	// TargetECS is the CloudFormation stack of cloudformation/bridge.yaml
	// (ECS Fargate behind an ALB); the default.
	TargetECS = "ecs"
	// TargetAgentCore is an Amazon Bedrock AgentCore Runtime with protocol
	// MCP: AgentCore runs the image in a microVM per runtime session and
	// authenticates every request (IAM SigV4, or a JWT authorizer) before
	// forwarding it.
	TargetAgentCore = "agentcore"
)

// AgentCore Runtime's MCP contract ("MCP protocol contract" in the
// AgentCore developer guide): the container serves Streamable HTTP on
// 0.0.0.0:8000 at /mcp, on ARM64. The platform adds an Mcp-Session-Id
// header to every request it forwards, the first (initialize) included.
const (
	AgentCorePort = 8000
	AgentCorePath = "/mcp"
	AgentCoreArch = "arm64"
)

// Variables the runtime's environment sets that cloudformation does not
// name (the bridge reads them: TestDeploymentsSetVariablesTheBridgeReads).
const (
	EnvInsecureNoAuth  = "BRIDGE_INSECURE_NO_AUTH"
	EnvAcceptSessionID = "BRIDGE_ACCEPT_SESSION_ID"
)

// agentCoreName is CreateAgentRuntime's pattern for agentRuntimeName.
var agentCoreName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,47}$`)

var roleArn = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$`)

// checkAgentCore is Check for TargetAgentCore.
func (c *AWSConfig) checkAgentCore() error {
	if !agentCoreName.MatchString(c.Stack) {
		return fmt.Errorf("%w: the AgentCore runtime name %q must start with a letter and hold only letters, digits and underscores (48 at most; no dashes)", ErrConfig, c.Stack)
	}
	ecsOnly := map[string]bool{
		"--certificate-arn": c.CertificateArn != "", "--allow-http": c.AllowHTTP, "--domain": c.DomainName != "",
		"--hosted-zone-id": c.HostedZoneID != "", "--auth-secret-arn": c.AuthSecretArn != "",
		"--desired-count": c.DesiredCount != 0, "--min-tasks": c.MinTasks != 0, "--max-tasks": c.MaxTasks != 0,
		"--parameter": len(c.Parameters) > 0,
	}
	for _, f := range []string{"--certificate-arn", "--allow-http", "--domain", "--hosted-zone-id", "--auth-secret-arn",
		"--desired-count", "--min-tasks", "--max-tasks", "--parameter"} {
		if ecsOnly[f] {
			return fmt.Errorf("%w: %s applies to --target ecs only: AgentCore serves HTTPS on its own endpoint, authenticates callers and scales by session", ErrConfig, f)
		}
	}
	if c.Delete {
		if c.Image != "" || c.Spec != nil || len(c.Command) > 0 || c.RoleArn != "" || c.JWTDiscoveryURL != "" {
			return fmt.Errorf("%w: --delete takes no image, spec, command, role or authorizer", ErrConfig)
		}
		return nil
	}
	if (c.Image == "") == (c.Spec == nil) {
		return fmt.Errorf("%w: give exactly one of --image IMAGE (deploy it as is) and --from SPEC (build one)", ErrConfig)
	}
	if c.Spec != nil && c.BridgeBinary == "" {
		return fmt.Errorf("%w: building an image needs the bridge binary (--bridge-binary)", ErrConfig)
	}
	if c.Spec == nil && len(c.Command) > 0 {
		return fmt.Errorf("%w: an AgentCore runtime runs its image's own command; build an image with yours (--from SPEC -- COMMAND ...)", ErrConfig)
	}
	if c.Spec == nil && c.Arch != "" && c.Arch != AgentCoreArch {
		return fmt.Errorf("%w: --arch %s: AgentCore runs ARM64 containers only; build the image for linux/arm64", ErrConfig, c.Arch)
	}
	if !roleArn.MatchString(c.RoleArn) {
		return fmt.Errorf("%w: --role-arn %q: want the ARN of the IAM role the runtime runs as (arn:aws:iam::ACCOUNT:role/NAME), trusted by bedrock-agentcore.amazonaws.com and allowed to pull the image and write logs", ErrConfig, c.RoleArn)
	}
	if c.JWTDiscoveryURL != "" {
		u, err := url.Parse(c.JWTDiscoveryURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || !strings.HasSuffix(u.Path, "/.well-known/openid-configuration") {
			return fmt.Errorf("%w: --jwt-discovery-url %q: want the https URL of an OpenID Connect discovery document (.../.well-known/openid-configuration)", ErrConfig, c.JWTDiscoveryURL)
		}
		if len(c.JWTAllowedClients) == 0 && len(c.JWTAllowedAudience) == 0 {
			return fmt.Errorf("%w: --jwt-discovery-url needs --jwt-allowed-clients or --jwt-allowed-audience: without them any token of that issuer would be accepted", ErrConfig)
		}
	} else if len(c.JWTAllowedClients) > 0 || len(c.JWTAllowedAudience) > 0 {
		return fmt.Errorf("%w: --jwt-allowed-clients and --jwt-allowed-audience need --jwt-discovery-url", ErrConfig)
	}
	return nil
}

// checkBinaryArch refuses a bridge binary the target cannot run.
func (c *AWSConfig) checkBinaryArch(b *Binary) error {
	if c.Target == TargetAgentCore && b.Arch != AgentCoreArch {
		return fmt.Errorf("%w: %s is built for %s; AgentCore runs ARM64 containers only; build one with: CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath -o bridge-linux-arm64 ./cmd/bridge, and pass --bridge-binary bridge-linux-arm64",
			ErrBinary, b.Path, b.Arch)
	}
	return nil
}

// CheckBinary checks a bridge binary to ship to this target: a static Linux
// executable (ReadBinary) of an architecture the target runs.
func (c *AWSConfig) CheckBinary(path string) error {
	b, err := ReadBinary(path)
	if err != nil {
		return err
	}
	return c.checkBinaryArch(b)
}

// AgentCoreEnvironment is the runtime's environment: the bridge serves the
// contract's port and path. It runs without its own bearer tokens because
// AgentCore authenticates every request before forwarding it and the
// container is reachable through AgentCore only (PUBLIC network mode gives
// the microVM outbound access, not an inbound address). It accepts the
// Mcp-Session-Id that AgentCore adds to initialize (--accept-session-id):
// the platform mints it and routes the session's requests by it.
func AgentCoreEnvironment() map[string]string {
	return map[string]string{
		cloudformation.EnvListen:    fmt.Sprintf("0.0.0.0:%d", AgentCorePort),
		cloudformation.EnvPath:      AgentCorePath,
		cloudformation.EnvSandbox:   "local",
		cloudformation.EnvLogFormat: "json",
		EnvInsecureNoAuth:           "true",
		EnvAcceptSessionID:          "true",
	}
}

// agentCoreRequest is the body of CreateAgentRuntime (update false) or
// UpdateAgentRuntime (update true, for the runtime id), for the image ref.
func (c *AWSConfig) agentCoreRequest(image string, update bool, id string) map[string]any {
	req := map[string]any{
		"description":          "mcp-bridge: one stdio MCP server per session, served over MCP Streamable HTTP",
		"agentRuntimeArtifact": map[string]any{"containerConfiguration": map[string]any{"containerUri": image}},
		"roleArn":              c.RoleArn,
		"networkConfiguration": map[string]any{"networkMode": "PUBLIC"},
		"protocolConfiguration": map[string]any{
			"serverProtocol": "MCP",
		},
		"environmentVariables": AgentCoreEnvironment(),
	}
	if update {
		req["agentRuntimeId"] = id
	} else {
		req["agentRuntimeName"] = c.Stack
		req["tags"] = map[string]string{"mcp-bridge:stack": c.Stack}
	}
	if c.JWTDiscoveryURL != "" {
		jwt := map[string]any{"discoveryUrl": c.JWTDiscoveryURL}
		if len(c.JWTAllowedClients) > 0 {
			jwt["allowedClients"] = c.JWTAllowedClients
		}
		if len(c.JWTAllowedAudience) > 0 {
			jwt["allowedAudience"] = c.JWTAllowedAudience
		}
		req["authorizerConfiguration"] = map[string]any{"customJWTAuthorizer": jwt}
	}
	return req
}

// compactJSON and indentJSON encode v with sorted keys and no HTML escaping.
func compactJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSpace(b.String())
}

func indentJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(v)
	return b.String()
}

func (d *Deployer) imageRef(s *state) string {
	if d.Config.Spec != nil {
		return s.imageRef
	}
	return d.Config.Image
}

func (d *Deployer) findRuntimeArgv(s *state) []string {
	return []string{"aws", "bedrock-agentcore-control", "list-agent-runtimes", "--region", s.region,
		"--query", fmt.Sprintf("agentRuntimes[?agentRuntimeName=='%s'].agentRuntimeId", d.Config.Stack), "--output", "text"}
}

func (d *Deployer) findRuntimeStep() step {
	return step{
		title: "Find the AgentCore runtime of this name",
		argv:  d.findRuntimeArgv,
		run: func(ctx context.Context, d *Deployer, s *state) error {
			argv := d.findRuntimeArgv(s)
			out, err := d.aws(ctx, s, false, argv[1:]...)
			if err != nil {
				return err
			}
			s.runtimeID = strings.TrimSpace(string(out))
			if s.runtimeID == "None" {
				s.runtimeID = ""
			}
			if strings.ContainsAny(s.runtimeID, " \t\n") {
				return fmt.Errorf("%w: several AgentCore runtimes are named %s (%s)", ErrAWS, d.Config.Stack, s.runtimeID)
			}
			return nil
		},
	}
}

// agentCoreSteps create or update the runtime and wait for it.
func (d *Deployer) agentCoreSteps() []step {
	c := d.Config
	createArgv := func(s *state) []string {
		return []string{"aws", "bedrock-agentcore-control", "create-agent-runtime", "--region", s.region,
			"--cli-input-json", compactJSON(c.agentCoreRequest(d.imageRef(s), false, ""))}
	}
	updateArgv := func(s *state) []string {
		id := s.runtimeID
		if id == "" {
			id = "<runtime-id>"
		}
		return []string{"aws", "bedrock-agentcore-control", "update-agent-runtime", "--region", s.region,
			"--cli-input-json", compactJSON(c.agentCoreRequest(d.imageRef(s), true, id))}
	}
	getArgv := func(s *state) []string {
		id := s.runtimeID
		if id == "" {
			id = "<runtime-id>"
		}
		return []string{"aws", "bedrock-agentcore-control", "get-agent-runtime", "--region", s.region,
			"--agent-runtime-id", id, "--output", "json"}
	}
	return []step{d.findRuntimeStep(), {
		title: "Create the runtime (protocol MCP, network mode PUBLIC, the image, the environment above)",
		argv:  createArgv,
		altIf: "a runtime of this name found above",
		alt:   updateArgv,
		run: func(ctx context.Context, d *Deployer, s *state) error {
			argv := createArgv(s)
			if s.runtimeID != "" {
				fmt.Fprintf(d.progress(), "updating the AgentCore runtime %s\n", s.runtimeID)
				argv = updateArgv(s)
			}
			out, err := d.aws(ctx, s, false, argv[1:]...)
			if err != nil {
				return err
			}
			var r struct{ AgentRuntimeArn, AgentRuntimeId string }
			if err := json.Unmarshal(out, &r); err != nil || r.AgentRuntimeArn == "" || r.AgentRuntimeId == "" {
				return fmt.Errorf("%w: %s returned no runtime ARN and ID: %s", ErrAWS, argv[2], out)
			}
			s.runtimeID, s.runtimeArn = r.AgentRuntimeId, r.AgentRuntimeArn
			return nil
		},
	}, {
		title: "Wait until the runtime is READY (every 10 seconds, 15 minutes at most)",
		argv:  getArgv,
		run: func(ctx context.Context, d *Deployer, s *state) error {
			ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
			defer cancel()
			tick := time.NewTicker(10 * time.Second)
			defer tick.Stop()
			for {
				argv := getArgv(s)
				out, err := d.aws(ctx, s, false, argv[1:]...)
				if err != nil {
					return err
				}
				var r struct{ Status, FailureReason string }
				if err := json.Unmarshal(out, &r); err != nil {
					return fmt.Errorf("%w: get-agent-runtime output is not the expected JSON: %v", ErrAWS, err)
				}
				fmt.Fprintf(d.progress(), "runtime %s: %s\n", s.runtimeID, r.Status)
				switch {
				case r.Status == "READY":
					return nil
				case strings.HasSuffix(r.Status, "_FAILED"):
					return fmt.Errorf("%w: the runtime is %s: %s", ErrAWS, r.Status, r.FailureReason)
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%w: the runtime is still %s after 15 minutes; see it in the console", ErrAWS, r.Status)
				case <-tick.C:
				}
			}
		},
	}}
}

func (d *Deployer) agentCoreDeleteSteps() []step {
	deleteArgv := func(s *state) []string {
		id := s.runtimeID
		if id == "" {
			id = "<runtime-id>"
		}
		return []string{"aws", "bedrock-agentcore-control", "delete-agent-runtime", "--region", s.region, "--agent-runtime-id", id}
	}
	return []step{d.findRuntimeStep(), {
		title: "Delete the runtime",
		argv:  deleteArgv,
		run: func(ctx context.Context, d *Deployer, s *state) error {
			if s.runtimeID == "" {
				return fmt.Errorf("%w: no AgentCore runtime is named %s in %s", ErrAWS, d.Config.Stack, s.region)
			}
			argv := deleteArgv(s)
			_, err := d.aws(ctx, s, false, argv[1:]...)
			return err
		},
	}}
}

// AgentCoreInvokeURL is the MCP endpoint of a runtime: its ARN, escaped
// whole, in the data plane's invocations path, on the DEFAULT endpoint.
func AgentCoreInvokeURL(region, arn string) string {
	return fmt.Sprintf("https://bedrock-agentcore.%s.amazonaws.com/runtimes/%s/invocations?qualifier=DEFAULT", region, url.QueryEscape(arn))
}

// agentCoreResult prints the endpoint and how to authenticate to it.
func (d *Deployer) agentCoreResult(w io.Writer, s *state) {
	c := d.Config
	u := AgentCoreInvokeURL(s.region, s.runtimeArn)
	if strings.HasPrefix(s.runtimeArn, "<") {
		// A dry run's placeholder, shown as such rather than escaped.
		u = fmt.Sprintf("https://bedrock-agentcore.%s.amazonaws.com/runtimes/<%s, URL-escaped>/invocations?qualifier=DEFAULT", s.region, strings.Trim(s.runtimeArn, "<>"))
	}
	fmt.Fprintf(w, "AgentCore runtime: %s\nMCP endpoint: %s\n\n", s.runtimeArn, u)
	if c.JWTDiscoveryURL != "" {
		cfg := map[string]any{"mcpServers": map[string]any{c.Stack: map[string]any{
			"type": "http", "url": u, "headers": map[string]string{"Authorization": "Bearer ${AGENTCORE_TOKEN}"},
		}}}
		fmt.Fprintf(w, "Client configuration (.mcp.json format; ${AGENTCORE_TOKEN} is an access token of %s, read from the environment):\n%s\n", c.JWTDiscoveryURL, indentJSON(cfg))
	} else {
		fmt.Fprintf(w, "AgentCore accepts only requests signed with AWS SigV4 (service bedrock-agentcore) by credentials allowed bedrock-agentcore:InvokeAgentRuntime on the runtime. Clients that send a bearer token cannot sign: deploy with --jwt-discovery-url for them.\n\n")
	}
	fmt.Fprintf(w, "AgentCore adds an Mcp-Session-Id to every request, initialize included; the bridge starts the session under it (%s=true).\n", EnvAcceptSessionID)
	fmt.Fprintf(w, "Logs: CloudWatch log group /aws/bedrock-agentcore/runtimes/%s-DEFAULT\n", s.runtimeID)
}

// agentCoreRequestText writes the creation request, for a dry run.
func (d *Deployer) agentCoreRequestText(w io.Writer, s *state) {
	fmt.Fprintf(w, "# AgentCore runtime request (create-agent-runtime; an update sends the same with agentRuntimeId instead of agentRuntimeName and tags)\n\n%s\n",
		indentJSON(d.Config.agentCoreRequest(d.imageRef(s), false, "")))
	fmt.Fprintf(w, "The container serves MCP on 0.0.0.0:%d at %s (AgentCore's MCP contract; the request has no port field: %s says it). AgentCore authenticates every request before it reaches the container, so the bridge runs without bearer tokens (%s).\n\n",
		AgentCorePort, AgentCorePath, cloudformation.EnvListen, EnvInsecureNoAuth)
}
