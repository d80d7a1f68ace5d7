package policy

import (
	"errors"
	"unicode/utf8"
)

// A glob is a pattern of the policy file: '*' matches any run of
// characters ('/' included, so that a URI pattern such as file:///docs/*
// covers a whole tree), '?' matches exactly one character, and '\' makes
// the character after it literal. Everything else matches itself, case
// sensitively: tool names and URIs are compared as the server wrote them.
//
// The standard library's path.Match was the other candidate; its '*' stops
// at '/', which suits file paths but not URIs, and its character classes
// are more than a policy needs.
type glob struct {
	pattern string
	literal bool // no wildcard: compared with ==
}

// parseGlob checks a pattern: it must not be empty or end in a lone '\'.
func parseGlob(p string) (glob, error) {
	if p == "" {
		return glob{}, errors.New("empty pattern")
	}
	if !utf8.ValidString(p) {
		return glob{}, errors.New("pattern is not valid UTF-8")
	}
	literal := true
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i == len(p)-1 {
				return glob{}, errors.New(`pattern ends with a lone \`)
			}
			literal = false
			i++
		case '*', '?':
			literal = false
		}
	}
	return glob{pattern: p, literal: literal}, nil
}

func (g glob) String() string { return g.pattern }

// match reports whether s matches the whole pattern. It runs in
// O(len(pattern) * len(s)) at worst: on a mismatch it backtracks only to
// the last '*', which is enough because a later '*' can absorb whatever an
// earlier one would have.
func (g glob) match(s string) bool {
	if g.literal {
		return g.pattern == s
	}
	p := g.pattern
	pi, si := 0, 0
	starP, starS := -1, 0 // where the last '*' is, and where s resumes after it
	for si < len(s) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '*':
				starP, starS = pi, si
				pi++
				continue
			case '?':
				_, n := utf8.DecodeRuneInString(s[si:])
				pi++
				si += n
				continue
			default:
				lit, n := c, 1
				if c == '\\' {
					lit = p[pi+1]
					n = 2
				}
				if lit == s[si] {
					pi += n
					si++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		// Let the last '*' absorb one more character and try again.
		_, n := utf8.DecodeRuneInString(s[starS:])
		starS += n
		pi, si = starP+1, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
