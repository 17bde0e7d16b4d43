package watchdog

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/lockwatch/lockwatch/registry"
)

// Defaults.
const (
	// DefaultSchedule is the sweep schedule: every tracked lock is renewed
	// on each tick.
	DefaultSchedule = "@every 10s"
	// DefaultMaxHold bounds how long one lock is kept alive.
	DefaultMaxHold = time.Hour
	// DefaultChunkSize is the number of keys renewed by one script call.
	DefaultChunkSize = 500
)

// Option configures a [Watchdog].
type Option interface{ apply(*options) error }

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	schedule  string
	maxHold   time.Duration
	onLost    func(registry.Lock, error)
	logger    *slog.Logger
	filter    func(registry.Lock) bool
	chunkSize int
	timeout   time.Duration
}

func defaultOptions() options {
	return options{
		schedule:  DefaultSchedule,
		maxHold:   DefaultMaxHold,
		logger:    slog.New(slog.DiscardHandler),
		chunkSize: DefaultChunkSize,
	}
}

// WithSchedule sets when sweeps run, as a robfig/cron spec: five fields, or
// six with leading seconds, or a descriptor such as "@hourly", or
// "@every <duration>" with any Go duration of at least 1ms ("@every 250ms"
// ticks every 250ms: unlike robfig/cron's own @every, the interval is not
// rounded to whole seconds). Locks whose TTL would fall below a third
// before the next tick are renewed between ticks by the fast lane, so the
// schedule bounds the work, not the safety. The default is
// [DefaultSchedule].
func WithSchedule(spec string) Option {
	return optionFunc(func(o *options) error {
		o.schedule = spec
		return nil
	})
}

// WithMaxHold bounds how long any lock is renewed after it was obtained;
// when it is reached the lock is untracked, reported to OnLost with
// [ErrMaxHold] and left to expire within its TTL. 0 means no bound; a
// negative value is an error. The default is [DefaultMaxHold].
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 0 {
			return fmt.Errorf("watchdog: WithMaxHold(%v): max hold must not be negative (0 means no bound)", d)
		}
		o.maxHold = d
		return nil
	})
}

// WithOnLost sets a function called once for each lock the watchdog stops
// renewing because it is lost or reached max hold. err tells why: compare it
// with [ErrLockGone], [ErrLockTaken] (both match [ErrLost]),
// [ErrUnreachable] or [ErrMaxHold] using errors.Is. fn runs on a
// watchdog goroutine, so it should return quickly. The default does nothing
// (losses are still logged). fn may be called from several of the
// watchdog's goroutines at once.
func WithOnLost(fn func(registry.Lock, error)) Option {
	return optionFunc(func(o *options) error {
		o.onLost = fn
		return nil
	})
}

// WithLogger sets the logger for renewals, losses and errors. The default
// discards everything; a nil logger is an error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("watchdog: WithLogger(nil): pass a logger, or leave the option out to log nothing")
		}
		o.logger = l
		return nil
	})
}

// WithFilter chooses which tracked locks are renewed: a lock for which fn
// returns false stays tracked but is left to expire. fn must be quick and
// must not call the registry. The default renews every tracked lock.
func WithFilter(fn func(registry.Lock) bool) Option {
	return optionFunc(func(o *options) error {
		o.filter = fn
		return nil
	})
}

// WithChunkSize sets how many keys one renew script call carries (on a
// cluster client, a chunk never spans hash slots). It must be between 1 and
// 10000. The default is [DefaultChunkSize].
func WithChunkSize(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("watchdog: WithChunkSize(%d): want 1..10000", n)
		}
		o.chunkSize = n
		return nil
	})
}

// WithTimeout bounds how long the watchdog waits for one renewal pipeline.
// It is passed down as the pipeline's context deadline, and the watchdog
// stops waiting when it passes even if the client ignores it (go-redis
// applies context deadlines to socket reads only with
// ContextTimeoutEnabled): the locks are then retried on another connection.
// 0 (the default) derives the bound from the shortest TTL in the pipeline:
// a quarter of it, at least 50ms and at most 5s. A negative value is an
// error.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 0 {
			return fmt.Errorf("watchdog: WithTimeout(%v): timeout must not be negative", d)
		}
		o.timeout = d
		return nil
	})
}
