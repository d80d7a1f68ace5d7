//go:build !unix

package connect

import "sync"

var storeMu sync.Mutex

// lockFile serializes refreshes within this process only: where flock is
// missing, concurrent bridge connect processes may each refresh.
func lockFile(string) (func(), error) {
	storeMu.Lock()
	return storeMu.Unlock, nil
}
