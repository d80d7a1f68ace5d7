// cgo builds a dynamically linked binary: what ReadBinary must refuse.
package main

// int answer(void) { return 42; }
import "C"

import "fmt"

func main() { fmt.Println(C.answer()) }
