// Package pin records what a server offers (its tools, prompts, resources
// and resource templates) in a lock file, and holds every later session to
// it.
//
// A server that changes its tools after they were vetted (a "rug pull",
// or dynamic capability injection: a new tool, or a changed description
// that tells the model to do something else) is stopped here: a tool that
// is not in the lock file, or whose digest differs, is dropped from
// tools/list and a call to it is refused, with an alert. The same holds
// for prompts, resources and resource templates (dropped from
// resources/list and resources/templates/list).
//
// A lock file also bounds what may be read: resources/read and
// resources/subscribe of a URI are refused unless the URI is the uri of a
// pinned resource (compared as strings, byte for byte: the server listed
// it so), or a URI that the uriTemplate of a pinned resource template can
// produce (RFC 6570 matching, see matcher: the template, each expression
// standing for what its operator may expand to, must match the whole URI),
// and unless the last list that showed the resource, or every template
// that matches, dropped it; such a URI is taken out of the
// resourceSubscriptions of a subscriptions/listen request (revision
// 2026-07-28), whose acknowledgment then leaves it out; the server's
// notifications/resources/updated
// of other URIs are not forwarded. A server's dynamic resources are
// thereby readable through their templates only: pin a server whose
// resources/list changes with its data (files, records) for its
// templates, and expect its listed resources to be dropped.
//
// A digest is "sha256:" and the hex SHA-256 of the RFC 8785 (JSON
// Canonicalization Scheme) form of an object made of the members of the
// item that describe it to a model or a user, as the server wrote them
// (absent members stay absent):
//
//	tools:              name, title, description, inputSchema, outputSchema, annotations
//	prompts:            name, title, description, arguments
//	resources:          uri, name, title, description, mimeType, annotations
//	resource templates: uriTemplate, name, title, description, mimeType, annotations
//
// _meta, icons and a resource's size are left out: servers put volatile data there, and a
// model does not read them. RFC 8785 sorts members by their UTF-16 code
// units, writes numbers as ECMAScript does and strings with the fewest
// escapes, so two servers that describe a tool the same way get the same
// digest whatever their JSON encoder.
//
// Independently of any lock file, descriptions are inspected: a string of
// an item (its description, or one inside its schema) that holds
// invisible or direction-changing Unicode, or a description longer than a
// limit, is how a poisoned description hides instructions from the human
// who reviews it; such an item is refused by default.
package pin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/gowebpki/jcs"
)

// LockVersion is the version of the lock file format this package writes
// and reads. Version 2 added resources (version 1 files, which left them
// out, would refuse every read of a listed resource).
const LockVersion = 2

// DefaultMaxDescriptionBytes is the longest description accepted by
// default. Descriptions of real tools are a few hundred bytes; one of many
// kilobytes has room for instructions nobody reads.
const DefaultMaxDescriptionBytes = 8192

// Canonicalization names how digests are computed, in every lock file.
const Canonicalization = "sha256 of RFC 8785 JSON of the members named in the mcp-bridge documentation (pin package)"

// A Lock is the content of a lock file: the digest of each tool, prompt,
// resource and resource template, by name (by URI for resources, by URI
// template for templates).
type Lock struct {
	Version int `json:"version"`
	// Server is what the server said it was at initialize: informative.
	Server *ServerInfo `json:"server,omitempty"`
	// Canonicalization says how the digests were computed.
	Canonicalization  string            `json:"canonicalization"`
	Tools             map[string]string `json:"tools"`
	Prompts           map[string]string `json:"prompts"`
	Resources         map[string]string `json:"resources"`
	ResourceTemplates map[string]string `json:"resourceTemplates"`
	// ImageDigest is the image ID ("sha256:...") of a Docker-sandboxed
	// server's image when it was pinned; bridge --pin-file refuses to start
	// a container from another (issue 29). Empty for a local server.
	ImageDigest string `json:"imageDigest,omitempty"`
}

// ServerInfo is the serverInfo of the initialize answer.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// A Kind is a kind of item a server lists.
type Kind struct {
	Name    string // "tool", "prompt", "resource", "resource template": in messages
	Method  string // the list method
	Array   string // the array member of its result
	Key     string // the member naming each item
	Members []string
	lock    func(*Lock) map[string]string
	call    string // the method that uses one, "" if none is matched
}

// Kinds are what a lock file pins.
var Kinds = []*Kind{
	{Name: "tool", Method: "tools/list", Array: "tools", Key: "name", call: "tools/call",
		Members: []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"},
		lock:    func(l *Lock) map[string]string { return l.Tools }},
	{Name: "prompt", Method: "prompts/list", Array: "prompts", Key: "name", call: "prompts/get",
		Members: []string{"name", "title", "description", "arguments"},
		lock:    func(l *Lock) map[string]string { return l.Prompts }},
	{Name: "resource template", Method: "resources/templates/list", Array: "resourceTemplates", Key: "uriTemplate",
		Members: []string{"uriTemplate", "name", "title", "description", "mimeType", "annotations"},
		lock:    func(l *Lock) map[string]string { return l.ResourceTemplates }},
	{Name: "resource", Method: "resources/list", Array: "resources", Key: "uri",
		Members: []string{"uri", "name", "title", "description", "mimeType", "annotations"},
		lock:    func(l *Lock) map[string]string { return l.Resources }},
}

// The kinds by name: a resource read is matched against resources and
// templates.
var (
	kindTool     = Kinds[0]
	kindPrompt   = Kinds[1]
	kindTemplate = Kinds[2]
	kindResource = Kinds[3]
)

// kindOfList returns the kind whose list method is method, or nil. A
// switch, not a loop comparing every kind's method: the interceptor asks
// for every answer (issue 16); TestKindOf holds it to Kinds.
func kindOfList(method string) *Kind {
	switch method {
	case "tools/list":
		return kindTool
	case "prompts/list":
		return kindPrompt
	case "resources/templates/list":
		return kindTemplate
	case "resources/list":
		return kindResource
	}
	return nil
}

// kindOfCall returns the kind whose item method uses (by name), or nil;
// a switch, as kindOfList.
func kindOfCall(method string) *Kind {
	switch method {
	case "tools/call":
		return kindTool
	case "prompts/get":
		return kindPrompt
	}
	return nil
}

// pinned returns the digest the lock holds for an item, if any.
func (l *Lock) pinned(k *Kind, name string) (string, bool) {
	d, ok := k.lock(l)[name]
	return d, ok
}

// NewLock returns an empty lock.
func NewLock() *Lock {
	return &Lock{Version: LockVersion, Canonicalization: Canonicalization,
		Tools: map[string]string{}, Prompts: map[string]string{}, Resources: map[string]string{}, ResourceTemplates: map[string]string{}}
}

// Digest computes the digest of an item of kind k as the server listed it
// (one element of the list's array, as written).
func Digest(k *Kind, item []byte) (string, error) {
	sel, err := selectMembers(k, item)
	if err != nil {
		return "", err
	}
	raw, err := json.Marshal(sel)
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("canonicalizing a %s: %w", k.Name, err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// selectMembers returns the members of item that are digested.
func selectMembers(k *Kind, item []byte) (map[string]json.RawMessage, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(item, &all); err != nil {
		return nil, fmt.Errorf("a %s that is not a JSON object: %w", k.Name, err)
	}
	sel := make(map[string]json.RawMessage, len(k.Members))
	for _, m := range k.Members {
		if v, ok := all[m]; ok {
			sel[m] = v
		}
	}
	return sel, nil
}

// ReadLock reads a lock file.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the pin file: %w", err)
	}
	l := NewLock()
	if err := json.Unmarshal(data, l); err != nil {
		return nil, fmt.Errorf("pin file %s: not a lock file written by bridge pin: %w", path, err)
	}
	switch {
	case l.Version != LockVersion:
		return nil, fmt.Errorf("pin file %s: version %d, this bridge reads version %d: write it again with bridge pin", path, l.Version, LockVersion)
	case l.Canonicalization != Canonicalization:
		return nil, fmt.Errorf("pin file %s: digests computed as %q, this bridge computes them as %q: write it again with bridge pin", path, l.Canonicalization, Canonicalization)
	}
	for _, k := range Kinds {
		for name, d := range k.lock(l) {
			if len(d) != len("sha256:")+64 || d[:7] != "sha256:" {
				return nil, fmt.Errorf("pin file %s: %s %q: digest %q is not sha256: and 64 hex digits", path, k.Name, name, d)
			}
		}
	}
	if l.Tools == nil || l.Prompts == nil || l.Resources == nil || l.ResourceTemplates == nil {
		return nil, fmt.Errorf("pin file %s: tools, prompts, resources and resourceTemplates must be objects (empty ones pin nothing of that kind)", path)
	}
	return l, nil
}

// WriteFile writes the lock as indented JSON, sorted, ending in a newline:
// a file to review and commit.
func (l *Lock) WriteFile(path string) error {
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// A Drift is a difference between a lock and what a server offers now.
type Drift struct {
	Kind   string // "tool", "prompt", "resource template", "resource"
	Name   string
	Change string // "added", "removed" or "changed"
}

func (d Drift) String() string { return fmt.Sprintf("%s %q %s", d.Kind, d.Name, d.Change) }

// Compare lists how now differs from the lock l, sorted by kind and name.
func Compare(l, now *Lock) []Drift {
	var out []Drift
	for _, k := range Kinds {
		was, is := k.lock(l), k.lock(now)
		var names []string
		for n := range was {
			names = append(names, n)
		}
		for n := range is {
			if _, ok := was[n]; !ok {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			a, inWas := was[n]
			b, inIs := is[n]
			switch {
			case !inWas:
				out = append(out, Drift{k.Name, n, "added"})
			case !inIs:
				out = append(out, Drift{k.Name, n, "removed"})
			case a != b:
				out = append(out, Drift{k.Name, n, "changed"})
			}
		}
	}
	return out
}

// errNotSupported: the server has no such list (no capability, or -32601).
var errNotSupported = errors.New("not supported")
