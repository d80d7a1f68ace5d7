// Package dockerfiles holds the Dockerfiles of mcp-bridge images, embedded
// so that `bridge image build` renders them without the source tree.
//
//   - Dockerfile: the bridge alone, built from source in a Go stage and
//     copied into a distroless, non-root runtime image. Build it from the
//     repository root: docker build -f dockerfiles/Dockerfile .
//   - scratch.Dockerfile: the bridge alone from a static binary built
//     beforehand (CGO_ENABLED=0), on an empty base. This is the variant that
//     needs no base image, so it builds where no registry is reachable.
//   - npx.Dockerfile.tmpl, uvx.Dockerfile.tmpl, go.Dockerfile.tmpl: the
//     bridge bundled with one stdio MCP server from a pinned package, the
//     bridge as entrypoint and the server as its child. The deploy package
//     renders them (text/template) from a package spec.
//
// Every image runs as a non-root user, installs the server at build time so
// that no code is downloaded when a task starts, and holds no secret: tokens
// reach the container as environment at run time.
package dockerfiles

import "embed"

// FS holds the Dockerfiles and templates listed in the package doc.
//
//go:embed Dockerfile scratch.Dockerfile *.Dockerfile.tmpl
var FS embed.FS
