package audit

import (
	"encoding/json"
	"time"
)

// An EgressRecord is the audit line of one connection a sandboxed server
// asked its egress proxy for: allowed (written when it ended)
// or refused.
type EgressRecord struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"` // "egress"
	Server  string    `json:"server,omitempty"`
	Session string    `json:"session,omitempty"` // its log form
	// Sub and ClientID are the session's principal, when known.
	Sub      string `json:"sub,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	Host     string `json:"host"` // as the server asked: a name or an IP address
	Port     int    `json:"port"`
	IP       string `json:"ip,omitempty"`     // the address dialed, or refused after resolution
	Outcome  string `json:"outcome"`          // "allowed" or "refused"
	Reason   string `json:"reason,omitempty"` // why refused, or why an allowed dial failed
	// BytesUp went from the server to the host, BytesDown back.
	BytesUp    int64 `json:"bytes_up"`
	BytesDown  int64 `json:"bytes_down"`
	DurationMS int64 `json:"duration_ms"`
}

// Egress writes one egress line, with the log's server. It is not on the
// path of any MCP message, so it uses encoding/json.
func (l *Log) Egress(r EgressRecord) {
	r.Event = "egress"
	r.Server = l.o.Server
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	line, err := json.Marshal(&r)
	if err != nil {
		return // cannot happen: strings and numbers only
	}
	line = append(line, '\n')
	o := l.out
	o.mu.Lock()
	_, err = o.w.Write(line)
	switch {
	case err != nil && !o.broken:
		l.o.Logger.Error("cannot write the audit log: records are lost until it works again", "err", err)
		o.broken = true
	case err == nil && o.broken:
		l.o.Logger.Info("the audit log is written again")
		o.broken = false
	}
	o.mu.Unlock()
}
