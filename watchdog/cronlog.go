package watchdog

import (
	"log/slog"

	"github.com/robfig/cron/v3"
)

// cronLogger passes robfig/cron's log lines to slog (cron's own default
// writes to stdout).
type cronLogger struct{ l *slog.Logger }

var _ cron.Logger = cronLogger{}

func (c cronLogger) Info(msg string, kv ...any) {
	c.l.Debug("watchdog: cron: "+msg, sanitize(kv)...)
}

func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error("watchdog: cron: "+msg, append([]any{"err", err}, sanitize(kv)...)...)
}

// sanitize keeps slog from reporting !BADKEY for odd key/value lists.
func sanitize(kv []any) []any {
	if len(kv)%2 == 1 {
		kv = append(kv, "")
	}
	return kv
}
