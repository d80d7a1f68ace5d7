# The bridge alone, from a static binary built beforehand:
#
#   CGO_ENABLED=0 GOOS=linux go build -trimpath -o bridge ./cmd/bridge
#   docker build -f scratch.Dockerfile -t mcp-bridge:scratch <dir holding bridge>
#
# `bridge image build` without --from writes this file and the binary into
# the build context itself. The image holds nothing but the binary: no shell,
# no CA certificates, no /etc/passwd.
FROM scratch
COPY bridge /bridge
USER 65532:65532
# Inside a container the bridge must listen on all interfaces; it then
# refuses to start without bearer tokens (BRIDGE_AUTH_TOKENS at run time).
ENV BRIDGE_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/bridge"]
