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
//
// Command is `bridge pin` (command.go): it starts a server once, in the
// sandbox its launcher runs, and writes what it offers to a lock file or
// compares it with one; cmd/bridge only reads the flags into it.
package pin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/aymanbagabas/go-udiff"
	"github.com/gowebpki/jcs"
)

// LockVersion is the version of the lock file format this package writes.
// Version 2 added resources (version 1 files, which left them out, would
// refuse every read of a listed resource). Version 3 holds,
// beside each digest, the members it is the digest of ("pinned"), for a
// reviewer to read and for bridge pin --check to diff; version 2 files,
// digests only, are still read.
const LockVersion = 3

// lockVersionDigestsOnly is the earlier version still read.
const lockVersionDigestsOnly = 2

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
	// a container from another. Empty for a local server.
	ImageDigest string `json:"imageDigest,omitempty"`

	// items are the digested members of each item, in RFC 8785 canonical
	// form, by kind (Kind.Array) and name; an item pinned by digest alone
	// (a version 2 file, or a lock built by hand) has none.
	items map[string]map[string]json.RawMessage
}

// An entry is how a version 3 lock file writes an item: its digest and
// the members it is of.
type entry struct {
	Digest string          `json:"digest"`
	Pinned json.RawMessage `json:"pinned,omitempty"`
}

// lockFile is the written form of a Lock.
type lockFile[E any] struct {
	Version           int          `json:"version"`
	Server            *ServerInfo  `json:"server,omitempty"`
	Canonicalization  string       `json:"canonicalization"`
	Tools             map[string]E `json:"tools"`
	Prompts           map[string]E `json:"prompts"`
	Resources         map[string]E `json:"resources"`
	ResourceTemplates map[string]E `json:"resourceTemplates"`
	ImageDigest       string       `json:"imageDigest,omitempty"`
}

// Item returns the digested members of an item of kind k, canonical
// (RFC 8785), or nil if the lock holds its digest alone.
func (l *Lock) Item(k *Kind, name string) json.RawMessage { return l.items[k.Array][name] }

// Set pins an item of kind k as the server listed it (one element of the
// list's array): its digest, and its digested members for reviewers.
func (l *Lock) Set(k *Kind, item []byte) error {
	var named map[string]json.RawMessage
	var name string
	if json.Unmarshal(item, &named) != nil || json.Unmarshal(named[k.Key], &name) != nil || name == "" {
		return fmt.Errorf("a %s without a %s", k.Name, k.Key)
	}
	d, canon, err := digest(k, item)
	if err != nil {
		return err
	}
	k.lock(l)[name] = d
	l.setItem(k, name, canon)
	return nil
}

func (l *Lock) setItem(k *Kind, name string, canon json.RawMessage) {
	if l.items == nil {
		l.items = map[string]map[string]json.RawMessage{}
	}
	if l.items[k.Array] == nil {
		l.items[k.Array] = map[string]json.RawMessage{}
	}
	l.items[k.Array][name] = canon
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
// for every answer; TestKindOf holds it to Kinds.
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
	d, _, err := digest(k, item)
	return d, err
}

// digest returns the digest of an item and the canonical form of its
// digested members.
func digest(k *Kind, item []byte) (string, json.RawMessage, error) {
	sel, err := selectMembers(k, item)
	if err != nil {
		return "", nil, err
	}
	raw, err := json.Marshal(sel)
	if err != nil {
		return "", nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", nil, fmt.Errorf("canonicalizing a %s: %w", k.Name, err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), canon, nil
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

// ReadLock reads a lock file, of version 3 or 2. In a version 3 file, an
// item's pinned members must have its digest: the digest is what is
// enforced and the members are what a reviewer reads, so the two must not
// say different things.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the pin file: %w", err)
	}
	notLock := func(err error) error {
		return fmt.Errorf("pin file %s: not a lock file written by bridge pin: %w", path, err)
	}
	var head struct {
		Version          int    `json:"version"`
		Canonicalization string `json:"canonicalization"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, notLock(err)
	}
	switch {
	case head.Version != LockVersion && head.Version != lockVersionDigestsOnly:
		return nil, fmt.Errorf("pin file %s: version %d, this bridge reads versions %d and %d: write it again with bridge pin", path, head.Version, lockVersionDigestsOnly, LockVersion)
	case head.Canonicalization != Canonicalization:
		return nil, fmt.Errorf("pin file %s: digests computed as %q, this bridge computes them as %q: write it again with bridge pin", path, head.Canonicalization, Canonicalization)
	}
	l := NewLock()
	l.Version = LockVersion
	if head.Version == lockVersionDigestsOnly {
		var f lockFile[string]
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, notLock(err)
		}
		if f.Tools == nil || f.Prompts == nil || f.Resources == nil || f.ResourceTemplates == nil {
			return nil, errNoMaps(path)
		}
		l.Server, l.Tools, l.Prompts, l.Resources, l.ResourceTemplates = f.Server, f.Tools, f.Prompts, f.Resources, f.ResourceTemplates
		l.ImageDigest = f.ImageDigest
	} else {
		var f lockFile[entry]
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, notLock(err)
		}
		if f.Tools == nil || f.Prompts == nil || f.Resources == nil || f.ResourceTemplates == nil {
			return nil, errNoMaps(path)
		}
		l.Server, l.ImageDigest = f.Server, f.ImageDigest
		byKind := map[*Kind]map[string]entry{kindTool: f.Tools, kindPrompt: f.Prompts, kindResource: f.Resources, kindTemplate: f.ResourceTemplates}
		for _, k := range Kinds {
			for name, e := range byKind[k] {
				k.lock(l)[name] = e.Digest
				if len(e.Pinned) == 0 {
					continue
				}
				d, canon, err := digest(k, e.Pinned)
				if err != nil {
					return nil, fmt.Errorf("pin file %s: %s %q: %w", path, k.Name, name, err)
				}
				if d != e.Digest {
					return nil, fmt.Errorf("pin file %s: %s %q: its pinned members have the digest %s, not the %s the file gives: one of them was edited; write the file again with bridge pin", path, k.Name, name, d, e.Digest)
				}
				l.setItem(k, name, canon)
			}
		}
	}
	for _, k := range Kinds {
		for name, d := range k.lock(l) {
			if len(d) != len("sha256:")+64 || d[:7] != "sha256:" {
				return nil, fmt.Errorf("pin file %s: %s %q: digest %q is not sha256: and 64 hex digits", path, k.Name, name, d)
			}
		}
	}
	return l, nil
}

func errNoMaps(path string) error {
	return fmt.Errorf("pin file %s: tools, prompts, resources and resourceTemplates must be objects (empty ones pin nothing of that kind)", path)
}

// WriteFile writes the lock (version 3) as indented JSON, members sorted,
// without HTML escapes, ending in a newline: a file to review and commit,
// the same bytes for the same lock, so that a git diff shows what changed.
func (l *Lock) WriteFile(path string) error {
	f := lockFile[entry]{Version: LockVersion, Server: l.Server, Canonicalization: l.Canonicalization, ImageDigest: l.ImageDigest}
	for _, k := range Kinds {
		m := make(map[string]entry, len(k.lock(l)))
		for name, d := range k.lock(l) {
			m[name] = entry{Digest: d, Pinned: l.Item(k, name)}
		}
		switch k {
		case kindTool:
			f.Tools = m
		case kindPrompt:
			f.Prompts = m
		case kindResource:
			f.Resources = m
		case kindTemplate:
			f.ResourceTemplates = m
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // descriptions are read by people: "<" stays "<"
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// A Drift is a difference between a lock and what a server offers now.
type Drift struct {
	Kind   string // "tool", "prompt", "resource template", "resource"
	Name   string
	Change string // "added", "removed" or "changed"
	// Was and Now are the item's digested members in the lock and on the
	// server (canonical JSON), when known: nil for an item pinned by
	// digest alone, or absent on that side.
	Was, Now json.RawMessage
}

func (d Drift) String() string { return fmt.Sprintf("%s %q %s", d.Kind, d.Name, d.Change) }

// Diff is a unified diff of the item's members, pinned and now, indented
// one member per line; "" when either side is unknown.
func (d Drift) Diff() string {
	if d.Was == nil || d.Now == nil {
		return ""
	}
	return udiff.Unified("pinned", "now", indent(d.Was), indent(d.Now))
}

// indent returns canonical JSON indented, one member per line.
func indent(canon json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, canon, "", "  "); err != nil {
		return string(canon) + "\n"
	}
	return buf.String() + "\n"
}

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
				out = append(out, Drift{Kind: k.Name, Name: n, Change: "added", Now: now.Item(k, n)})
			case !inIs:
				out = append(out, Drift{Kind: k.Name, Name: n, Change: "removed", Was: l.Item(k, n)})
			case a != b:
				out = append(out, Drift{Kind: k.Name, Name: n, Change: "changed", Was: l.Item(k, n), Now: now.Item(k, n)})
			}
		}
	}
	return out
}

// errNotSupported: the server has no such list (no capability, or -32601).
var errNotSupported = errors.New("not supported")
