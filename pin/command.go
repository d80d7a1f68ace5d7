package pin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// CaptureTimeout bounds how long bridge pin waits for the server to start,
// initialize and list everything (bridge check waits this beyond its
// initialize timeout).
const CaptureTimeout = 2 * time.Minute

// A Command is bridge pin's work on one server, started once in the
// sandbox the caller chose: Write records what it offers in a lock file,
// Check compares that with a lock file. Every zero value is documented,
// except NewLauncher, which is required.
type Command struct {
	// NewLauncher builds the launcher of the server; the function it
	// returns releases it. The launcher must not enforce a lock's image
	// digest: the container starts from whatever the image now is. A
	// launcher with an ImageDigest(ctx) (string, error) method (the
	// Docker sandbox's) has its image's digest recorded too.
	NewLauncher func(ctx context.Context) (sandbox.Launcher, func(), error)
	// MaxMessageBytes bounds a line of the server's stdout (zero: peer's
	// default).
	MaxMessageBytes int
	// Inspection is what every listed item is held to: an item that fails
	// it is refused, not pinned.
	Inspection Inspection
	// StopGrace is the launcher's grace for a stopping server: the
	// command waits twice this and 30 s more for it to end.
	StopGrace time.Duration
	// Logger receives the connection's and the sandbox's records (nil:
	// discarded).
	Logger *slog.Logger
	// Stdout receives the result: what was pinned, or the drift found
	// (nil: discarded). Stderr receives the refused items (nil:
	// discarded).
	Stdout, Stderr io.Writer
}

// Write starts the server once and writes what it offers to the lock file
// output. It writes nothing, and fails, if an item is refused.
func (c *Command) Write(ctx context.Context, output string) error {
	lock, problems, err := c.take(ctx)
	if err != nil {
		return err
	}
	c.refused(problems)
	if len(problems) > 0 {
		return fmt.Errorf("not writing %s: %s refused (see above); fix the server, or loosen with --allow-hidden-unicode or --max-description-bytes",
			output, count(len(problems), "item is", "items are"))
	}
	if err := lock.WriteFile(output); err != nil {
		return fmt.Errorf("writing the lock file: %w", err)
	}
	fmt.Fprintf(c.out(), "pinned %s in %s\n", lockCounts(lock), output)
	return nil
}

// Check starts the server once and compares what it offers with pinned,
// read from the file pinFile: it prints what was added, removed or changed,
// with a diff of each changed item, and fails if anything was or if an item
// is refused. image names the pinned image in what it prints.
func (c *Command) Check(ctx context.Context, pinned *Lock, pinFile, image string) error {
	lock, problems, err := c.take(ctx)
	if err != nil {
		return err
	}
	c.refused(problems)
	out := c.out()
	drift := Compare(pinned, lock)
	for _, d := range drift {
		fmt.Fprintln(out, d)
		// How it changed: the diff of its pinned members and the
		// server's ("changed" alone gave a reviewer nothing).
		switch diff := d.Diff(); {
		case diff != "":
			fmt.Fprint(out, indentLines(diff, "    "))
		case d.Change == "changed" && d.Was == nil:
			fmt.Fprintf(out, "    (%s holds only its digest: write it again with bridge pin to see what changed next time)\n", pinFile)
		}
	}
	if was := pinned.ImageDigest; was != "" && was != lock.ImageDigest {
		fmt.Fprintf(out, "image %q changed: digest %s, pinned %s\n", image, lock.ImageDigest, was)
		drift = append(drift, Drift{Kind: "image", Name: image, Change: "changed"})
	}
	if len(drift) > 0 || len(problems) > 0 {
		return fmt.Errorf("the MCP server drifted from %s: %s, %s", pinFile,
			count(len(drift), "change", "changes"), count(len(problems), "refused item", "refused items"))
	}
	fmt.Fprintf(out, "no drift: %s match %s\n", lockCounts(lock), pinFile)
	return nil
}

// take starts the server, captures what it offers (and its image's
// digest), and stops it, within CaptureTimeout.
func (c *Command) take(ctx context.Context) (*Lock, []Problem, error) {
	logger := c.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, CaptureTimeout)
	defer cancel()
	launcher, closeLauncher, err := c.NewLauncher(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer closeLauncher()
	proc, err := launcher.Launch(ctx, "pin")
	if err != nil {
		return nil, nil, fmt.Errorf("starting the MCP server: %w", err)
	}
	conn := peer.New(proc, ignoreRouter{}, &peer.Options{MaxMessageBytes: c.MaxMessageBytes, Logger: logger})
	lock, problems, err := Capture(ctx, conn, c.Inspection)
	if err == nil {
		// The image of a Docker-sandboxed server is pinned too.
		if im, ok := launcher.(interface {
			ImageDigest(context.Context) (string, error)
		}); ok {
			lock.ImageDigest, err = im.ImageDigest(ctx)
		}
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 2*c.StopGrace+30*time.Second)
	defer cancelStop()
	if cerr := conn.Close(stopCtx); cerr != nil {
		logger.Warn("stopping the MCP server", "err", cerr)
	}
	if err != nil {
		return nil, nil, err
	}
	return lock, problems, nil
}

// refused lists the items refused on Stderr.
func (c *Command) refused(problems []Problem) {
	w := c.Stderr
	if w == nil {
		w = io.Discard
	}
	for _, p := range problems {
		fmt.Fprintf(w, "refused: %s\n", p)
	}
}

func (c *Command) out() io.Writer {
	if c.Stdout == nil {
		return io.Discard
	}
	return c.Stdout
}

// lockCounts says what a lock holds: "3 tools, 1 prompt, 0 resources and
// 0 resource templates".
func lockCounts(l *Lock) string {
	return count(len(l.Tools), "tool", "tools") + ", " + count(len(l.Prompts), "prompt", "prompts") + ", " +
		count(len(l.Resources), "resource", "resources") + " and " + count(len(l.ResourceTemplates), "resource template", "resource templates")
}

// count writes n with the noun that agrees with it.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// indentLines prefixes each line of s.
func indentLines(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if line != "" {
			b.WriteString(prefix + line)
		}
	}
	return b.String()
}

// ignoreRouter ignores what the server sends besides the answers the
// command waits for (its notifications; it has no client to ask anything
// of).
type ignoreRouter struct{}

func (ignoreRouter) Route(*peer.Message) {}
func (ignoreRouter) Ended(error)         {}
