// hello stands in for the bridge in the image build test: it reports what
// the image gives it (user, arguments, root directory), so the test can
// check that the scratch image runs a static binary as a non-root user.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	entries, _ := os.ReadDir("/")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	fmt.Printf("uid=%d gid=%d args=%s root=%s\n", os.Getuid(), os.Getgid(), strings.Join(os.Args[1:], ","), strings.Join(names, ","))
}
