package session

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestIdleTimeout, in a synctest bubble (no real waiting): a session
// lives while client messages keep coming, whatever their kind, and ends
// with ErrIdle one idle timeout after the last one; its server is then
// stopped.
func TestIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: time.Minute})
		sess, err := reg.Create(context.Background(), "owner")
		if err != nil {
			t.Fatal(err)
		}
		<-l.ids
		proc := <-l.procs

		time.Sleep(59 * time.Second)
		if _, err := sess.Post([]Message{msg(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)}, PostOptions{Resumable: true}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Second) // 118s since creation, 59s since the last message
		synctest.Wait()
		if err := sess.Err(); err != nil {
			t.Fatalf("the session ended %v after its last message: %v", 59*time.Second, err)
		}
		if got, err := reg.Get(sess.ID()); err != nil || got != sess {
			t.Fatalf("Get: %v", err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if err := sess.Err(); !errors.Is(err, ErrIdle) {
			t.Fatalf("after the idle timeout: %v, want ErrIdle", err)
		}
		<-sess.Stopped()
		select {
		case <-proc.Stopped():
		default:
			t.Fatal("the server was not stopped")
		}
		if _, err := reg.Get(sess.ID()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after the end: %v, want ErrNotFound", err)
		}
		if sess.Owner() != "owner" {
			t.Fatalf("Owner = %v", sess.Owner())
		}
	})
}
