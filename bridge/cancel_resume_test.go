package bridge_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// A cancelled request's stream ends so that no client resumes it forever:
// the TypeScript SDK 1.x and 2.x (legacy mode)
// transports resume a stream that ended without a response with GET and
// Last-Event-ID, and retry as long as the server answers 200. The child,
// npm's server-everything, ignores the cancellation and goes on with its
// progress. At most one such GET follows the cancellation, in the three
// seconds (three of the client's retry intervals) the client waits.
func TestCancelledStreamResumedOnce(t *testing.T) {
	peers := npmPeers(t)
	for _, sdk := range []string{"1", "2"} {
		t.Run("sdk"+sdk, func(t *testing.T) {
			var resumes atomic.Int64
			b := startBridge(t, bridgeConfig{
				command: []string{filepath.Join(peers, "node22"), filepath.Join(peers, "node_modules/.bin/mcp-server-everything")},
				server: func(s *httptest.Server) {
					next := s.Config.Handler
					s.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
							resumes.Add(1)
							rec := &statusRecorder{ResponseWriter: w}
							next.ServeHTTP(rec, r)
							t.Logf("GET Last-Event-ID %s: %d", r.Header.Get("Last-Event-ID"), rec.status)
							return
						}
						next.ServeHTTP(w, r)
					})
				},
			})
			script, err := filepath.Abs("testdata/ts-cancel-client.mjs")
			if err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile(script)
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(peers, "ts-cancel-client.mjs")
			if err := os.WriteFile(dst, src, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(ctxT(t), filepath.Join(peers, "node22"), dst, b.URL)
			cmd.Env = append(os.Environ(), "SDK="+sdk, "WAIT_MS=3000", "TOOL=trigger-long-running-operation", `ARGS={"duration":2,"steps":20}`)
			cmd.Stderr = testWriter{t}
			out, err := cmd.Output()
			var got map[string]any
			if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
				t.Fatalf("TS client: %v\n%s", err, out)
			}
			t.Logf("the TS client saw %v; %d resuming GETs", got, resumes.Load())
			if n := resumes.Load(); n > 1 {
				t.Errorf("%d GETs resumed the cancelled request's stream, want at most 1", n)
			}
			// The server keeps sending progress after the cancellation:
			// none reaches the client, which no longer knows the token.
			if errs := fmt.Sprint(got["errors"]); strings.Contains(errs, "unknown token") {
				t.Errorf("progress of the cancelled request reached the client: %.300s", errs)
			}
		})
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
