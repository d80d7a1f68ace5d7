//go:build race

package bridge

// raceEnabled: under the race detector sync.Pool drops items at random and
// allocation grows, so tests that count allocated bytes skip.
const raceEnabled = true
