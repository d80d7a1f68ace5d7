package cloudformation

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustLoad(t *testing.T, yaml []byte) (*cfnSchema, map[string]any) {
	t.Helper()
	s, err := loadSchema()
	if err != nil {
		t.Fatalf("loading goformation's CloudFormation schema: %v", err)
	}
	tmpl, err := loadTemplate(yaml)
	if err != nil {
		t.Fatalf("parsing the template: %v", err)
	}
	return s, tmpl
}

func TestTemplateIsValid(t *testing.T) {
	s, tmpl := mustLoad(t, Template)
	for _, e := range validate(s, tmpl) {
		t.Error(e)
	}
	if len(Template) > MaxTemplateBytes {
		t.Errorf("the template is %d bytes; CloudFormation takes at most %d without an S3 bucket", len(Template), MaxTemplateBytes)
	}
}

// TestValidatorFindsMistakes breaks the template in ways CloudFormation
// would reject, one at a time, and expects the validator to say so: a
// validator that passes everything proves nothing.
func TestValidatorFindsMistakes(t *testing.T) {
	s, err := loadSchema()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"unknown property", "      HealthCheckPath: /healthz\n", "      HealthCheckPth: /healthz\n", `unknown property "HealthCheckPth"`},
		{"unknown nested property", "          StopTimeout: 120\n", "          StopTimeOut: 120\n", `unknown property "StopTimeOut"`},
		{"unknown resource type", "Type: AWS::ECS::Cluster\n", "Type: AWS::ECS::Clusterr\n", "unknown resource type"},
		{"wrong type", "      HealthyThresholdCount: 2\n", "      HealthyThresholdCount: [2]\n", "want a number"},
		{"missing required", "      AssumeRolePolicyDocument:\n        Version: \"2012-10-17\"\n        Statement:\n          - Effect: Allow\n            Principal: {Service: ecs-tasks.amazonaws.com}\n            Action: sts:AssumeRole\n      ManagedPolicyArns:", "      ManagedPolicyArns:", `required property "AssumeRolePolicyDocument"`},
		{"conditional route outside its If", "            - !Join [\" \", [!Ref DefaultRoute, !Ref PublicSubnet1Routes, !Ref PublicSubnet2Routes]]\n            - existing\n", "            - existing\n            - !Join [\" \", [!Ref DefaultRoute, !Ref PublicSubnet1Routes, !Ref PublicSubnet2Routes]]\n", "DefaultRoute exists only if CreateVpc"},
		{"dangling Ref", "TaskDefinition: !Ref TaskDefinition", "TaskDefinition: !Ref TaskDef", `"TaskDef" is no parameter`},
		{"dangling Sub", `"${AWS::StackName}-bridge"`, `"${StackNam}-bridge"`, `"StackNam" is no parameter`},
		{"control: unchanged", "      SubnetId: !Ref PublicSubnet1\n", "      SubnetId: !Ref PublicSubnet1\n", ""},
		{"dangling Ref in a free-form map", "awslogs-stream-prefix: bridge", "awslogs-stream-prefix: !Ref Prefix", `"Prefix" is no parameter`},
		{"conditional secret named unconditionally", "                  - !If [CreateAuthSecret, !Ref AuthTokenSecret, !Ref AuthTokenSecretArn]\n", "                  - !Ref AuthTokenSecret\n", "AuthTokenSecret exists only if CreateAuthSecret"},
		{"conditional resource outside its If", "VpcId: !If [CreateVpc, !Ref Vpc, !Ref VpcId]\n      SecurityGroupIngress:\n        - IpProtocol: tcp\n          FromPort: !If", "VpcId: !Ref Vpc\n      SecurityGroupIngress:\n        - IpProtocol: tcp\n          FromPort: !If", "Vpc exists only if CreateVpc"},
		{"unknown attribute", "!GetAtt LoadBalancer.DNSName\n        HostedZoneId", "!GetAtt LoadBalancer.DnsName\n        HostedZoneId", "LoadBalancer.DnsName"},
		{"unknown condition", "Condition: CreateDnsRecord", "Condition: CreateDns", `no condition "CreateDns"`},
		{"unused parameter", "  LogRetentionDays:\n", "  Unused:\n    Type: String\n  LogRetentionDays:\n", "Parameters.Unused: never used"},
		{"bad DependsOn", "DependsOn: Listener", "DependsOn: Listenr", `no resource "Listenr"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if strings.Count(string(Template), c.old) != 1 {
				t.Fatalf("the text to replace occurs %d times", strings.Count(string(Template), c.old))
			}
			broken := strings.Replace(string(Template), c.old, c.new, 1)
			tmpl, err := loadTemplate([]byte(broken))
			if err != nil {
				t.Fatal(err)
			}
			errs := validate(s, tmpl)
			if c.want == "" {
				// The control: a replacement that changes nothing.
				if len(errs) != 0 {
					t.Fatalf("unchanged template: %v", errs)
				}
				return
			}
			for _, e := range errs {
				if strings.Contains(e, c.want) {
					return
				}
			}
			t.Fatalf("no error contains %q; got %q", c.want, errs)
		})
	}
}

// Helpers to walk the generic template.
func obj(t *testing.T, x any, path ...string) map[string]any {
	t.Helper()
	for _, p := range path {
		m, ok := x.(map[string]any)
		if !ok {
			t.Fatalf("at %q: not an object", p)
		}
		x = m[p]
	}
	m, ok := x.(map[string]any)
	if !ok {
		t.Fatalf("%v: not an object (%T)", path, x)
	}
	return m
}

func list(t *testing.T, x any) []any {
	t.Helper()
	l, ok := x.([]any)
	if !ok {
		t.Fatalf("not a list: %T", x)
	}
	return l
}

// attr finds Key == key in a list of {Key, Value} and returns Value.
func attr(t *testing.T, attrs any, key string) any {
	t.Helper()
	for _, a := range list(t, attrs) {
		m := a.(map[string]any)
		if m["Key"] == key {
			return m["Value"]
		}
	}
	t.Fatalf("attribute %q not set", key)
	return nil
}

func refName(x any) string {
	m, _ := x.(map[string]any)
	s, _ := m["Ref"].(string)
	return s
}

func paramNumber(t *testing.T, tmpl map[string]any, name, field string) float64 {
	t.Helper()
	p := obj(t, tmpl, "Parameters", name)
	switch v := p[field].(type) {
	case float64:
		return v
	case string:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	t.Fatalf("Parameters.%s.%s not set", name, field)
	return 0
}

// TestTemplateDeploysWhatTheIssueAsks checks the properties the deployment
// relies on, beyond validity.
func TestTemplateDeploysWhatTheIssueAsks(t *testing.T) {
	_, tmpl := mustLoad(t, Template)
	res := func(name string) map[string]any { return obj(t, tmpl, "Resources", name, "Properties") }

	// Idle timeout long enough for SSE streams.
	lb := res("LoadBalancer")
	if p := refName(attr(t, lb["LoadBalancerAttributes"], "idle_timeout.timeout_seconds")); p != "IdleTimeoutSeconds" {
		t.Fatalf("idle timeout comes from %q", p)
	}
	if d, m := paramNumber(t, tmpl, "IdleTimeoutSeconds", "Default"), paramNumber(t, tmpl, "IdleTimeoutSeconds", "MinValue"); d < 3600 || m < 3600 {
		t.Errorf("idle timeout default %v, minimum %v; want both >= 3600", d, m)
	}

	// Health check on /healthz; draining delay; IP targets (awsvpc).
	tg := res("TargetGroup")
	if tg["HealthCheckPath"] != "/healthz" || tg["TargetType"] != "ip" {
		t.Errorf("target group: health check %v, target type %v", tg["HealthCheckPath"], tg["TargetType"])
	}
	if p := refName(attr(t, tg["TargetGroupAttributes"], "deregistration_delay.timeout_seconds")); p != "DeregistrationDelaySeconds" {
		t.Errorf("deregistration delay comes from %q", p)
	}

	// HTTPS when a certificate is given.
	ln := res("Listener")
	if got := obj(t, ln, "Protocol")["Fn::If"]; !equalJSON(got, []any{"HasCertificate", "HTTPS", "HTTP"}) {
		t.Errorf("listener protocol: %v", got)
	}

	// The container: logs to the stack's log group, secrets from Secrets
	// Manager, nothing secret in plain environment.
	td := res("TaskDefinition")
	ctr := list(t, td["ContainerDefinitions"])[0].(map[string]any)
	lc := obj(t, ctr, "LogConfiguration")
	if lc["LogDriver"] != "awslogs" || refName(obj(t, lc, "Options")["awslogs-group"]) != "LogGroup" {
		t.Errorf("log configuration: %v", lc)
	}
	if obj(t, tmpl, "Resources", "LogGroup")["Type"] != "AWS::Logs::LogGroup" {
		t.Errorf("no log group")
	}
	secrets := map[string]bool{}
	for _, s := range list(t, ctr["Secrets"]) {
		secrets[s.(map[string]any)["Name"].(string)] = true
	}
	for _, want := range []string{EnvAuthTokens, EnvAffinitySecret} {
		if !secrets[want] {
			t.Errorf("secret %s not given to the container", want)
		}
	}
	env := map[string]any{}
	for _, e := range list(t, ctr["Environment"]) {
		m := e.(map[string]any)
		name := m["Name"].(string)
		env[name] = m["Value"]
		if strings.Contains(name, "TOKEN") || strings.Contains(name, "SECRET") {
			t.Errorf("%s is plain environment; secrets go in Secrets", name)
		}
	}
	for _, want := range []string{EnvListen, EnvPath, EnvSandbox, EnvAffinityAddr, EnvLogFormat} {
		if _, ok := env[want]; !ok {
			t.Errorf("environment %s not set", want)
		}
	}
	if env[EnvSandbox] != "local" || env[EnvAffinityAddr] != "ecs" {
		t.Errorf("sandbox %v, affinity address %v", env[EnvSandbox], env[EnvAffinityAddr])
	}
	// The bridge's keep-alive must outlast the load balancer's idle timeout,
	// whose parameter allows at most 4000 s.
	idle, err := time.ParseDuration(fmt.Sprint(env[EnvHTTPIdleTimeout]))
	if maxIdle := paramNumber(t, tmpl, "IdleTimeoutSeconds", "MaxValue"); err != nil || idle <= time.Duration(maxIdle)*time.Second {
		t.Errorf("%s = %v, want above the load balancer's largest idle timeout (%v s)", EnvHTTPIdleTimeout, env[EnvHTTPIdleTimeout], maxIdle)
	}

	// The task role grants nothing; the execution role reads exactly the
	// stack's secrets.
	for k := range res("TaskRole") {
		if k != "AssumeRolePolicyDocument" {
			t.Errorf("the task role has %s; it must grant nothing", k)
		}
	}
	pol := list(t, res("ExecutionRole")["Policies"])
	for _, p := range pol {
		for _, st := range list(t, obj(t, p, "PolicyDocument")["Statement"]) {
			for _, r := range list(t, st.(map[string]any)["Resource"]) {
				if r == "*" {
					t.Errorf("the execution role's inline policy grants on *")
				}
			}
		}
	}

	// Desired count and autoscaling.
	if refName(res("Service")["DesiredCount"]) != ParamDesiredCount {
		t.Errorf("desired count is not the %s parameter", ParamDesiredCount)
	}
	st := res("ScalableTarget")
	if refName(st["MinCapacity"]) != ParamMinTasks || refName(st["MaxCapacity"]) != ParamMaxTasks {
		t.Errorf("scalable target capacity: %v..%v", st["MinCapacity"], st["MaxCapacity"])
	}

	// What bridge deploy aws sets and reads exists.
	for _, p := range []string{ParamImage, ParamServerCommand, ParamCpuArchitecture, ParamCertificateArn, ParamDomainName, ParamHostedZoneID, ParamDesiredCount, ParamMinTasks, ParamMaxTasks, ParamAuthTokenSecretArn} {
		obj(t, tmpl, "Parameters", p)
	}
	for _, o := range []string{OutputEndpoint, OutputAuthSecretArn, OutputLogGroup, OutputLoadBalancerDN} {
		obj(t, tmpl, "Outputs", o)
	}

	// The sandbox limitation is stated where users read it.
	if d, _ := tmpl["Description"].(string); !strings.Contains(d, "--sandbox docker is not offered") {
		t.Errorf("the description does not say that --sandbox docker is not offered")
	}
}

func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func TestParameterNames(t *testing.T) {
	names, err := ParameterNames()
	if err != nil {
		t.Fatal(err)
	}
	_, tmpl := mustLoad(t, Template)
	params := obj(t, tmpl, "Parameters")
	if len(names) != len(params) {
		t.Fatalf("ParameterNames gave %d names, the template has %d parameters", len(names), len(params))
	}
	for _, n := range names {
		if _, ok := params[n]; !ok {
			t.Errorf("%q is not a parameter", n)
		}
	}
	if names[0] != ParamImage {
		t.Errorf("first parameter %q; want %q (the order of the file)", names[0], ParamImage)
	}
}
