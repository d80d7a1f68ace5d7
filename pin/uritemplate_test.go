package pin

import "testing"

// The expansions of RFC 6570's section 3.2 match their templates (with
// var="value", hello="Hello World!", path="/foo/bar", x=1024, y=768,
// empty="", list=(red,green,blue), keys=(semi,";"),(dot,"."),(comma,","),
// undef undefined); what no values could expand to does not.
func TestMatcher(t *testing.T) {
	for _, c := range []struct {
		template, uri string
		match         bool
	}{
		{"{var}", "value", true},
		{"{hello}", "Hello%20World%21", true},
		{"{hello}", "Hello World!", false},
		{"{+path}/here", "/foo/bar/here", true},
		{"{path}/here", "/foo/bar/here", false},
		{"{path}/here", "%2Ffoo%2Fbar/here", true},
		{"{#path,x}/here", "#/foo/bar,1024/here", true},
		{"X{.var}", "X.value", true},
		{"X{.var}", "X", true},
		{"X{.var}", "Xvalue", false},
		{"{/var,x}/here", "/value/1024/here", true},
		{"{;x,y}", ";x=1024;y=768", true},
		{"{;x,y,empty}", ";x=1024;y=768;empty", true},
		{"{?x,y}", "?x=1024&y=768", true},
		{"{?x,y,empty}", "?x=1024&y=768&empty=", true},
		{"{?x,y}", "?y=768", true},
		{"{?x,y}", "?y=768&x=1024", false}, // out of order
		{"{?x,y}", "?z=1", false},
		{"{?x,y}", "?x=1&z=1", false},
		{"{?undef}", "", true},
		{"?fixed=yes{&x}", "?fixed=yes&x=1024", true},
		{"{var:3}", "val", true},
		{"{var:3}", "valu", false},
		{"{var:3}", "%20ab", true},
		{"{list}", "red,green,blue", true},
		{"{list*}", "red,green,blue", true},
		{"{/list*,path:4}", "/red/green/blue/%2Ffoo", true},
		{"{?keys*}", "?semi=%3B&dot=.&comma=%2C", true},
		{"{?list*}", "?list=red&list=green&list=blue", true},
		{"{x,hello,y}", "1024,Hello%20World%21,768", true},
		{"file:///docs/{name}", "file:///docs/a/b", false},
		{"file:///docs/{name}", "file:///docs/a.md", true},
		{"file:///docs/{name}", "file:///docs/a.md/", false},
		{"a.b{x}", "aXb", false}, // literals are literal
	} {
		re, err := matcher(c.template)
		if err != nil {
			t.Errorf("%s: %v", c.template, err)
			continue
		}
		if got := re.MatchString(c.uri); got != c.match {
			t.Errorf("%s against %q: %v, want %v (%s)", c.template, c.uri, got, c.match, re)
		}
	}
	for _, bad := range []string{"{", "}", "a{b", "a}b{c}", "{=x}", "{x y}", "{x:0}", "{x:10000}", "{x:3*}", "{}", "{x,}", "{.}"} {
		if re, err := matcher(bad); err == nil {
			t.Errorf("%q compiles: %s", bad, re)
		}
	}
}
