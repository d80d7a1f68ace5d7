package affinity

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// containerResponse has the shape of GET ${ECS_CONTAINER_METADATA_URI_V4} on
// Fargate as documented in "Amazon ECS task metadata v4 JSON response for
// tasks on Fargate" (field names, nesting); the values are made up.
const containerResponse = `{
  "DockerId": "cd189a933e5849daa93386466019ab50-2495160603",
  "Name": "bridge",
  "DockerName": "bridge",
  "Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/mcp-bridge/demo:abc",
  "Labels": {"com.amazonaws.ecs.container-name": "bridge"},
  "DesiredStatus": "RUNNING",
  "KnownStatus": "RUNNING",
  "Limits": {"CPU": 2},
  "Type": "NORMAL",
  "LogDriver": "awslogs",
  "Networks": [
    {
      "NetworkMode": "awsvpc",
      "IPv4Addresses": ["10.0.2.106"],
      "AttachmentIndex": 0,
      "MACAddress": "12:29:e7:1b:0f:1d",
      "IPv4SubnetCIDRBlock": "10.0.2.0/24",
      "PrivateDNSName": "ip-10-0-2-106.us-east-1.compute.internal",
      "SubnetGatewayIpv4Address": "10.0.2.1/24"
    }
  ]
}`

func TestResolveSelfECS(t *testing.T) {
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v4/abc" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(containerResponse))
	}))
	defer md.Close()
	client := md.Client()

	t.Setenv(ECSMetadataEnv, md.URL+"/v4/abc")
	got, err := ResolveSelf(t.Context(), SelfECS, "0.0.0.0:8080", client)
	if err != nil || got != "10.0.2.106:8080" {
		t.Fatalf("ResolveSelf(ecs) = %q, %v; want 10.0.2.106:8080", got, err)
	}

	t.Setenv(ECSMetadataEnv, md.URL+"/v4/missing")
	if _, err := ResolveSelf(t.Context(), SelfECS, ":8080", client); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("metadata 404: err = %v", err)
	}

	t.Setenv(ECSMetadataEnv, "")
	if _, err := ResolveSelf(t.Context(), SelfECS, ":8080", client); err == nil || !strings.Contains(err.Error(), ECSMetadataEnv) {
		t.Fatalf("no env: err = %v; want it to name %s", err, ECSMetadataEnv)
	}
}

func TestECSTaskIPNoAddress(t *testing.T) {
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"Networks":[{"NetworkMode":"bridge","IPv4Addresses":[]}]}`))
	}))
	defer md.Close()
	if _, err := ECSTaskIP(t.Context(), md.Client(), md.URL); err == nil || !strings.Contains(err.Error(), "awsvpc") {
		t.Fatalf("err = %v; want a hint about awsvpc", err)
	}
}

func TestResolveSelfGiven(t *testing.T) {
	for _, c := range []struct{ spec, listen, want string }{
		{"10.1.2.3:9000", ":8080", "10.1.2.3:9000"},
		{"bridge-1", "0.0.0.0:8080", "bridge-1:8080"},
		{"fd00::1", "[::]:8080", "[fd00::1]:8080"},
	} {
		got, err := ResolveSelf(t.Context(), c.spec, c.listen, nil)
		if err != nil || got != c.want {
			t.Errorf("ResolveSelf(%q, %q) = %q, %v; want %q", c.spec, c.listen, got, err, c.want)
		}
	}
	for _, c := range []struct{ spec, listen string }{
		{"", ":8080"},
		{"0.0.0.0", ":8080"},
		{"10.1.2.3:0", ":8080"},
		{"10.1.2.3", "no-port"},
	} {
		if got, err := ResolveSelf(t.Context(), c.spec, c.listen, nil); err == nil {
			t.Errorf("ResolveSelf(%q, %q) = %q; want an error", c.spec, c.listen, got)
		}
	}
}
