package bridge

import (
	"context"
	"log/slog"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// Refusals of requests (bad tokens, missing scopes) are logged at most
// refusalLogBurst at once, then refusalLogRate a second: one client
// sending bad tokens made the bridge write an INFO line each, 730 KiB/s.
// The lines left out are counted in the next one.
const (
	refusalLogRate  = 1
	refusalLogBurst = 10
)

// refusalLog logs refusals at a bounded rate. Safe for concurrent use.
type refusalLog struct {
	lim     *rate.Limiter
	skipped atomic.Int64 // lines left out since the last one written
}

func newRefusalLog() *refusalLog {
	return &refusalLog{lim: rate.NewLimiter(refusalLogRate, refusalLogBurst)}
}

// log writes the line, or counts it if the rate is exceeded; a line
// written after some were left out says how many ("suppressed").
func (l *refusalLog) log(logger *slog.Logger, level slog.Level, msg string, args ...any) {
	if !l.lim.Allow() {
		l.skipped.Add(1)
		return
	}
	if n := l.skipped.Swap(0); n > 0 {
		args = append(args, "suppressed", n)
	}
	logger.Log(context.Background(), level, msg, args...)
}
