// Package deploy turns a stdio MCP server into a cloud deployment: it renders
// the Dockerfile that bundles the bridge with a pinned server package
// (dockerfiles/), builds and pushes the image through the Docker Engine API,
// and creates or updates the CloudFormation stack (cloudformation/) with the
// aws CLI, or with TargetAgentCore a Bedrock AgentCore Runtime (protocol
// MCP) running that image.
//
// It is the logic of two commands, whose flags cmd/bridge maps to it:
// `bridge image build` is BuildImage (ImageOptions, RunHint), and `bridge
// deploy aws` is a Deployer over an AWSConfig.
//
// Nothing here holds a secret beyond one call: the ECR password goes from
// `aws ecr get-login-password` to the engine's X-Registry-Auth header and
// nowhere else, and the bridge's bearer tokens never leave Secrets Manager
// except into the running task's environment.
//
// A dry run (Deployer.DryRun) prints the Dockerfile, the template and every
// step with its exact command line, from the same step list Run executes,
// and makes no network call.
package deploy
