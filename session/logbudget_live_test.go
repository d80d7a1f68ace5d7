package session

// Events no client read (a client that posts calls and
// drops each connection before the answer) escaped the process-wide budget;
// now the session holding the most of them is ended once they alone exceed
// it, and no other.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
)

func TestLogBudgetEndsSessionOfUndeliveredFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 64 << 10
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1, LogMaxTotalBytes: budget})
		quiet, qp := startSession(t, reg, l)
		flood, fp := startSession(t, reg, l)

		// The quiet session holds one answer its client did not read yet.
		qr := postMsg(t, quiet, `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
		qr.Detach()
		qp.Read(t)
		qp.Write(t, `{"jsonrpc":"2.0","id":1,"result":{"x":"`+strings.Repeat("q", 1000)+`"}}`+"\n")

		// The flood: 40 answers of 4 KiB, 2.5 times the budget, none read.
		answer := `{"jsonrpc":"2.0","id":%d,"result":{"x":"` + strings.Repeat("f", 4<<10) + `"}}` + "\n"
		for i := range 40 {
			synctest.Wait() // the answers so far are routed, and their consequences done
			if isDone(flood.Done()) {
				break
			}
			r := postMsg(t, flood, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call"}`, i))
			r.Detach() // the client dropped the connection
			fp.Read(t)
			fp.Write(t, fmt.Sprintf(answer, i))
		}
		synctest.Wait() // the answers are routed

		st := reg.logBudget.Stats()
		if st.Bytes > budget+budget/16 {
			t.Fatalf("undelivered events hold %d bytes under a budget of %d", st.Bytes, budget)
		}
		<-flood.Done()
		if err := flood.Err(); !errors.Is(err, ErrLogBudget) {
			t.Fatalf("the flooding session ended with %v, want ErrLogBudget", err)
		}
		select {
		case <-quiet.Done():
			t.Fatalf("the quiet session ended too: %v", quiet.Err())
		default:
		}
		// The quiet session's answer is still there for its client.
		r, err := quiet.Resume(qr.Stream(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := next(t, r); !strings.Contains(got, `"id":1`) {
			t.Fatalf("the quiet session's answer: %.40s", got)
		}
		r.Detach()
		if st := reg.logBudget.Stats(); st.Ended != 1 {
			t.Errorf("Stats().Ended = %d, want 1", st.Ended)
		}
	})
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
