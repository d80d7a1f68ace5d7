package affinity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// ECSMetadataEnv names the environment variable through which ECS (Fargate
// platform 1.4.0 and later, and the EC2 container agent 1.39.0 and later)
// gives each container its task metadata endpoint, version 4.
const ECSMetadataEnv = "ECS_CONTAINER_METADATA_URI_V4"

// SelfECS is the value of ResolveSelf's spec that asks the ECS task metadata
// endpoint for this task's address.
const SelfECS = "ecs"

// ResolveSelf turns the configured address of this instance into the
// "host:port" other instances reach it at.
//
//   - "ecs": the container's private IPv4 address from the ECS task metadata
//     endpoint v4 (awsvpc network mode: each task has its own address, and the
//     container port is the port other tasks dial), with listenAddr's port.
//   - "host:port": used as given.
//   - "host": joined with listenAddr's port.
//
// listenAddr is the address the bridge listens on (":8080", "0.0.0.0:8080").
// client may be nil (a client with a 5 s timeout is used).
func ResolveSelf(ctx context.Context, spec, listenAddr string, client *http.Client) (string, error) {
	_, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", fmt.Errorf("affinity: cannot take the port from the listen address %q: %w", listenAddr, err)
	}
	switch {
	case spec == "":
		return "", errors.New("affinity: this instance's address is not set; give host:port, or \"ecs\" on Amazon ECS")
	case spec == SelfECS:
		uri := os.Getenv(ECSMetadataEnv)
		if uri == "" {
			return "", fmt.Errorf("affinity: the address is %q but %s is not set: this is not an ECS task (Fargate platform 1.4.0+ or agent 1.39.0+); give host:port instead", SelfECS, ECSMetadataEnv)
		}
		ip, err := ECSTaskIP(ctx, client, uri)
		if err != nil {
			return "", err
		}
		return net.JoinHostPort(ip, port), nil
	}
	addr := spec
	if _, _, err := net.SplitHostPort(spec); err != nil {
		addr = net.JoinHostPort(spec, port)
	}
	if err := checkAddr(addr); err != nil {
		return "", fmt.Errorf("affinity: this instance's address %q: %w", spec, err)
	}
	return addr, nil
}

// containerMetadata is the part of the ECS container metadata response
// (GET ${ECS_CONTAINER_METADATA_URI_V4}) that we read. Field names as
// documented in "Amazon ECS task metadata v4 JSON response":
// https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-fargate-response.html
type containerMetadata struct {
	Networks []struct {
		NetworkMode   string   `json:"NetworkMode"`
		IPv4Addresses []string `json:"IPv4Addresses"`
	} `json:"Networks"`
}

// ECSTaskIP returns the first private IPv4 address of this container's
// awsvpc network, read from the container metadata endpoint at uri.
func ECSTaskIP(ctx context.Context, client *http.Client, uri string) (string, error) {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return "", fmt.Errorf("affinity: bad ECS metadata URI %q: %w", uri, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("affinity: cannot read the ECS task metadata at %s: %w", uri, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("affinity: cannot read the ECS task metadata at %s: %w", uri, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("affinity: the ECS task metadata endpoint %s answered %s: %s", uri, resp.Status, strings.TrimSpace(string(body)))
	}
	var md containerMetadata
	if err := json.Unmarshal(body, &md); err != nil {
		return "", fmt.Errorf("affinity: the ECS task metadata at %s is not the expected JSON: %w", uri, err)
	}
	for _, n := range md.Networks {
		for _, a := range n.IPv4Addresses {
			if ip := net.ParseIP(a); ip != nil && ip.To4() != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
				return a, nil
			}
		}
	}
	return "", fmt.Errorf("affinity: the ECS task metadata at %s lists no IPv4 address for this container; the task must use the awsvpc network mode (Fargate always does)", uri)
}
