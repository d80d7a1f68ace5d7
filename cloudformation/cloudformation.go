// Package cloudformation holds the AWS CloudFormation template that runs the
// bridge on Amazon ECS behind an Application Load Balancer, embedded so that
// `bridge deploy aws` works without the source tree.
//
// The template (bridge.yaml) is plain CloudFormation with parameters, usable
// on its own with `aws cloudformation deploy`. Its tests check it
// structurally against the CloudFormation resource schema shipped in
// github.com/awslabs/goformation/v7 (every resource type and property known,
// every reference resolvable, conditional resources referenced only under
// their condition), and check the properties the deployment relies on:
// idle timeout, health check path, draining, secrets, roles.
package cloudformation

import (
	_ "embed"
	"errors"

	"go.yaml.in/yaml/v3"
)

// Template is bridge.yaml.
//
//go:embed bridge.yaml
var Template []byte

// MaxTemplateBytes is the largest template CloudFormation accepts inline
// (--template-file without an S3 bucket).
const MaxTemplateBytes = 51200

// Names of the template's parameters and outputs that `bridge deploy aws`
// sets or reads.
const (
	ParamImage              = "Image"
	ParamServerCommand      = "ServerCommand"
	ParamCpuArchitecture    = "CpuArchitecture"
	ParamCertificateArn     = "CertificateArn"
	ParamDomainName         = "DomainName"
	ParamHostedZoneID       = "HostedZoneId"
	ParamDesiredCount       = "DesiredCount"
	ParamMinTasks           = "MinTasks"
	ParamMaxTasks           = "MaxTasks"
	ParamAuthTokenSecretArn = "AuthTokenSecretArn"

	OutputEndpoint       = "McpEndpoint"
	OutputAuthSecretArn  = "AuthTokenSecretArn"
	OutputLogGroup       = "LogGroupName"
	OutputLoadBalancerDN = "LoadBalancerDNSName"
)

// Environment the template gives the bridge container. cmd/bridge must read
// these (flags and BRIDGE_* variables).
const (
	EnvListen       = "BRIDGE_LISTEN"
	EnvPath         = "BRIDGE_PATH"
	EnvSandbox      = "BRIDGE_SANDBOX"
	EnvAffinityAddr = "BRIDGE_AFFINITY_ADDR"
	EnvLogFormat    = "BRIDGE_LOG_FORMAT"
	// EnvHTTPIdleTimeout is above the load balancer's idle timeout.
	EnvHTTPIdleTimeout = "BRIDGE_HTTP_IDLE_TIMEOUT"
	EnvAuthTokens      = "BRIDGE_AUTH_TOKENS"
	EnvAffinitySecret  = "BRIDGE_AFFINITY_SECRET"
)

// ParameterNames returns the names of the template's parameters, in order.
func ParameterNames() ([]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(Template, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the template is not a YAML mapping")
	}
	top := doc.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		if top[i].Value != "Parameters" {
			continue
		}
		var names []string
		params := top[i+1].Content
		for j := 0; j+1 < len(params); j += 2 {
			names = append(names, params[j].Value)
		}
		return names, nil
	}
	return nil, errors.New("the template has no Parameters")
}
