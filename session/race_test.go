//go:build race

package session

// raceEnabled: the race detector multiplies memory and time, so tests that
// measure either skip under it.
const raceEnabled = true
