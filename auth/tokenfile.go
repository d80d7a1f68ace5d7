package auth

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// ReadTokenFile reads the bearer tokens of a file, one per line; blank
// lines and lines starting with # are skipped. A file without a token is
// an error: an empty file must never mean "no authentication".
func ReadTokenFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var toks []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			toks = append(toks, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%s holds no token (one per line)", path)
	}
	return toks, nil
}
