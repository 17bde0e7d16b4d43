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
	// A call holds Redis for about 4 µs a key: 100 keys hold the
	// application's commands up by about half a millisecond.
	DefaultChunkSize = 100
	// DefaultStopTimeout bounds how long Stop waits for renewals in flight
	// and for queued OnLost calls.
	DefaultStopTimeout = 2 * time.Second

	// MinMaxHold is the shortest max hold WithMaxHold accepts (0 aside).
	MinMaxHold = time.Second
	// MinTimeout and MaxTimeout bound WithTimeout.
	MinTimeout = time.Millisecond
	MaxTimeout = time.Minute
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
	stopWait  time.Duration
}

func defaultOptions() options {
	return options{
		schedule:  DefaultSchedule,
		maxHold:   DefaultMaxHold,
		logger:    slog.New(slog.DiscardHandler),
		chunkSize: DefaultChunkSize,
		stopWait:  DefaultStopTimeout,
	}
}

// WithSchedule sets when sweeps run, as a robfig/cron spec: five fields, or
// six with leading seconds, or a descriptor such as "@hourly", or
// "@every <duration>" with any Go duration of at least 1ms ("@every 250ms"
// ticks every 250ms: unlike robfig/cron's own @every, the interval is not
// rounded to whole seconds). Locks whose TTL would fall below a third
// before the next tick are renewed between ticks by the fast lane, so the
// schedule bounds the work, not the safety. [Attach] refuses a spec that
// does not parse and one with no activation within a year (such as
// "0 0 30 2 *", February 30th). The default is [DefaultSchedule].
func WithSchedule(spec string) Option {
	return optionFunc(func(o *options) error {
		o.schedule = spec
		return nil
	})
}

// WithMaxHold bounds how long any lock is renewed after it was obtained;
// when it is reached the lock is untracked, reported to OnLost with
// [ErrMaxHold] and left to expire within its TTL. 0 means no bound; a
// negative value, or one below [MinMaxHold] (WithMaxHold(60) is 60ns, a
// unit mistake), is an error. The default is [DefaultMaxHold].
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 0 {
			return fmt.Errorf("watchdog: WithMaxHold(%v): max hold must not be negative (0 means no bound)", d)
		}
		if d > 0 && d < MinMaxHold {
			return fmt.Errorf("watchdog: WithMaxHold(%v): max hold must be at least %v, or 0 for no bound (a bare number is nanoseconds: write 60*time.Second)", d, MinMaxHold)
		}
		o.maxHold = d
		return nil
	})
}

// WithOnLost sets a function called once for each lock the watchdog stops
// renewing because it is lost or reached max hold. err tells why: compare it
// with [ErrLockGone], [ErrLockTaken] (both match [ErrLost]),
// [ErrUnreachable] (an *[UnreachableError] wrapping the last renewal error)
// or [ErrMaxHold] using errors.Is.
//
// Calls are made one at a time, in the order the losses happened, on a
// goroutine of their own: a slow fn delays only later calls, never a
// renewal, and a panic in fn is recovered and logged. Stop waits for queued
// calls up to its timeout ([WithStopTimeout]); calls still queued then are
// made after Stop has returned. The default does nothing (losses are still
// logged).
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
// returns false stays tracked but is left to expire; its contexts
// ([Watchdog.Context]) are cancelled with [ErrUnconfirmed] before its key
// may expire, as for any lock not confirmed in time. fn must be quick and
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

// WithStopTimeout bounds how long [Watchdog.Stop] waits for renewals in
// flight to answer and for queued OnLost calls to finish; 0 means it does
// not wait for them. A negative value is an error. The default is
// [DefaultStopTimeout].
func WithStopTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 0 {
			return fmt.Errorf("watchdog: WithStopTimeout(%v): timeout must not be negative", d)
		}
		o.stopWait = d
		return nil
	})
}

// WithTimeout bounds how long the watchdog waits for one renewal pipeline.
// It is passed down as the pipeline's context deadline, and the watchdog
// stops waiting when it passes even if the client ignores it (go-redis
// applies context deadlines to socket reads only with
// ContextTimeoutEnabled): the locks are then retried on another connection.
// 0 (the default) derives the bound from the shortest TTL in the pipeline:
// a quarter of it, at least 50ms and at most 5s. Other values must lie
// between [MinTimeout] and [MaxTimeout]: below, no renewal could answer in
// time; above, a stalled pipeline would be waited for past any lock's
// TTL.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 0 {
			return fmt.Errorf("watchdog: WithTimeout(%v): timeout must not be negative", d)
		}
		if d != 0 && (d < MinTimeout || d > MaxTimeout) {
			return fmt.Errorf("watchdog: WithTimeout(%v): timeout must be between %v and %v (or 0 to derive it from each pipeline's TTLs)", d, MinTimeout, MaxTimeout)
		}
		o.timeout = d
		return nil
	})
}
