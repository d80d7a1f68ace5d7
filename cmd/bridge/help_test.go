package main

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
)

func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), args, &out, &errOut); code != 0 {
		t.Fatalf("bridge %q: exit %d, stderr %s", args, code, errOut.String())
	}
	return out.String()
}

// Every flag of bridge --help is in exactly one group, declared
// beside the flag, and listed once, under its group's title.
func TestEveryFlagInOneGroup(t *testing.T) {
	help := helpOf(t, "--help")
	// The groups: what follows the opening, which names a few flags.
	i := strings.Index(help, "\n"+helpGroups[0].Title+":\n")
	if i < 0 {
		t.Fatalf("--help has no group titled %q", helpGroups[0].Title)
	}
	help = help[i:]
	titleAt := map[*flagx.Group]int{}
	for _, g := range helpGroups {
		i := strings.Index(help, "\n"+g.Title+":\n")
		if i < 0 {
			t.Fatalf("--help has no group titled %q", g.Title)
		}
		titleAt[g] = i
	}
	newFlagSet(defaultConfig()).VisitAll(func(f *flag.Flag) {
		g, _ := flagHelp.GroupOf(f)
		if g == nil {
			t.Errorf("--%s is in no group of bridge --help: in newFlagSet (cmd/bridge/config.go), wrap its usage in its group, e.g. gEdge.In(\"...\"); the groups are listed in help.go", f.Name)
			return
		}
		line := "\n  --" + f.Name + " "
		if n := strings.Count(help, line); n != 1 {
			t.Errorf("--help lists --%s %d times, want once", f.Name, n)
			return
		}
		at := strings.Index(help, line)
		var in *flagx.Group
		for _, h := range helpGroups {
			if titleAt[h] < at && (in == nil || titleAt[h] > titleAt[in]) {
				in = h
			}
		}
		if in != g {
			t.Errorf("--%s is listed under %q, want %q", f.Name, in.Title, g.Title)
		}
	})
}

// --help opens with three examples and the five flags a
// newcomer needs, marks what a --config server may set, and says which era
// the groups of limits apply to.
func TestHelpOpening(t *testing.T) {
	help := helpOf(t, "--help")
	ex := strings.Index(help, "\nExamples:\n")
	start := strings.Index(help, "\nStart with these:\n")
	first := strings.Index(help, "\n"+helpGroups[0].Title+":\n")
	if ex < 0 || start < ex || first < start {
		t.Fatalf("--help does not open with examples, then the flags to start with, then the groups:\n%s", help[:min(len(help), 3000)])
	}
	if n := strings.Count(help[ex:start], "\n  bridge "); n != 3 {
		t.Errorf("%d examples, want 3", n)
	}
	for _, f := range []string{"--listen", "--auth-token-file", "--env", "--sandbox", "--config"} {
		if !strings.Contains(help[start:first], "\n  "+f+" ") {
			t.Errorf("the flags to start with lack %s", f)
		}
	}
	for _, k := range configfile.ServerKeys {
		if !regexp.MustCompile(`\n  --` + k + ` [^\n]*\*\n`).MatchString(help) {
			t.Errorf("--%s, a key of a --config server, is not marked *", k)
		}
	}
	if regexp.MustCompile(`\n  --(listen|config|auth-token-file) [^\n]*\*\n`).MatchString(help) {
		t.Error("a flag a --config server cannot set is marked *")
	}
	for _, g := range []*flagx.Group{gSessions, gLog, gStateless} {
		if !strings.Contains(g.Title, "2025") && !strings.Contains(g.Title, "2026-07-28") {
			t.Errorf("group %q does not say which era its limits apply to", g.Title)
		}
	}
}

// Every subcommand's help writes flags one way (--flag), and
// bridge pin --help lists its own.
func TestSubcommandHelpFlagStyle(t *testing.T) {
	singleDash := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, args := range [][]string{
		{"--help"}, {"connect", "--help"}, {"pin", "--help"}, {"check", "--help"},
		{"image", "--help"}, {"image", "build", "--help"}, {"deploy", "--help"}, {"deploy", "aws", "--help"},
	} {
		help := helpOf(t, args...)
		if m := singleDash.FindString(help); m != "" {
			t.Errorf("bridge %q writes a flag with one dash: %q", args, m)
		}
	}
	pin := helpOf(t, "pin", "--help")
	for _, f := range []string{"--output", "--check", "--pin-file", "--sandbox", "--image", "--env"} {
		if !strings.Contains(pin, "\n  "+f+" ") {
			t.Errorf("bridge pin --help does not list %s", f)
		}
	}
	check := helpOf(t, "check", "--help")
	for _, f := range []string{"--initialize-timeout", "--env", "--sandbox"} {
		if !strings.Contains(check, "\n  "+f+" ") {
			t.Errorf("bridge check --help does not list %s", f)
		}
	}
}

// No help text names a Go identifier of the code (package.Name): a
// rename across the code must not reach what users read (a rename once
// turned --resource-url's "canonical URL" into "configfile.Canonical URL").
func TestHelpNamesNoGoIdentifiers(t *testing.T) {
	qualified := regexp.MustCompile(`\b(?:[a-z][a-z0-9]*)\.[A-Z][A-Za-z0-9]*\b`)
	for _, args := range [][]string{{"--help"}, {"connect", "--help"}, {"deploy", "--help"}, {"image", "--help"}, {"pin", "--help"}, {"check", "--help"}} {
		help := helpOf(t, args...)
		if m := qualified.FindAllString(help, -1); m != nil {
			t.Errorf("bridge %s names Go identifiers: %q", strings.Join(args, " "), m)
		}
	}
}
