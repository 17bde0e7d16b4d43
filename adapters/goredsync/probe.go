package goredsync

import (
	"context"
	"crypto/sha1"
	"errors"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

const probeKey = "lockwatch:probe"

// The steps of the probe, named as the unpinned scripts they send are
// reported.
const (
	stepObtain        = "obtain"
	stepRefresh       = "refresh"
	stepRefreshSetNX  = "refresh (WithSetNXOnExtend)"
	stepRelease       = "release"
	probeSetNXExpiry  = 2500 * time.Millisecond // sent as PX
	probeDefaultReply = int64(1)                // what every script answers
)

// Probe runs the linked redsync against a recording fake go-redis client (no
// server, no network) through redsync's go-redis v9 pool: Lock, Extend and
// Unlock of a mutex with the default options, then of one with
// WithSetNXOnExtend and a sub-second-precision expiry. The fake answers every
// EVALSHA with NOSCRIPT, so redsync also sends each script's source with
// EVAL, and every SET NX with success.
//
// Probe returns an *[registry.UpstreamChangedError] naming every script whose
// SHA1 is not pinned, and a plain error when a step sent no command the
// adapter recognises (for Lock, a SET NX that the stack walk attributes to
// redsync; for Extend and Unlock, a script classified alike before it is
// sent, as pending, and with the fake's answer) or redsync failed against the
// fake. It is safe for concurrent use.
func (a *Adapter) Probe(ctx context.Context) error { return a.probe(ctx, a.recorder()) }

// recorder returns the probe's fake Redis for a.
func (a *Adapter) recorder() *adapterkit.Recorder[script] {
	return &adapterkit.Recorder[script]{
		Package: "goredsync", Library: Library, Pins: a.table(), Classify: a.Classify, Answer: answer,
	}
}

// probe runs the probe's steps against rec.
func (a *Adapter) probe(ctx context.Context, rec *adapterkit.Recorder[script]) error {
	return rec.Probe(ctx, func(ctx context.Context, rdb *redis.Client) []adapterkit.Step[script] {
		rs := redsync.New(goredis.NewPool(rdb))
		// mutexSteps returns the steps that lock, extend and unlock m. Lock's
		// step sends no pinned script: it must send a SET.
		mutexSteps := func(m *redsync.Mutex, ttl time.Duration, refresh string, touch script) []adapterkit.Step[script] {
			held := func(op registry.Op, ttl time.Duration) func() registry.Action {
				return func() registry.Action {
					return registry.Action{Op: op, Key: probeKey, Value: m.Value(), TTL: ttl}
				}
			}
			return []adapterkit.Step[script]{
				{Name: stepObtain, Script: scriptUnknown, Run: func() error { return m.LockContext(ctx) }, Want: held(registry.OpObtain, ttl)},
				{Name: refresh, Script: touch, Run: func() error { return succeeded(m.ExtendContext(ctx)) },
					Want: held(registry.OpRefresh, ttl), WantPending: held(registry.OpRefresh, ttl)},
				{Name: stepRelease, Script: scriptDelete, Run: func() error { return succeeded(m.UnlockContext(ctx)) },
					Want: held(registry.OpRelease, 0), WantPending: held(registry.OpRelease, 0)},
			}
		}
		return append(
			mutexSteps(rs.NewMutex(probeKey, redsync.WithTries(1)), 8*time.Second, stepRefresh, scriptTouch),
			mutexSteps(rs.NewMutex(probeKey, redsync.WithTries(1), redsync.WithExpiry(probeSetNXExpiry), redsync.WithSetNXOnExtend()),
				probeSetNXExpiry, stepRefreshSetNX, scriptTouchWithSetNX)...)
	})
}

// succeeded turns redsync's (ok, err) results into an error.
func succeeded(ok bool, err error) error {
	if err == nil && !ok {
		err = errors.New("redsync reported failure without an error")
	}
	return err
}

// answer is the fake Redis redsync talks to through its go-redis v9 pool:
// success to every SET, NOSCRIPT to every EVALSHA, probeDefaultReply to every
// EVAL, the SHA1 of the source to SCRIPT LOAD, and an error to anything else.
// The recorder runs it, and then Classify, on the goroutine that sent cmd, so
// the adapter's stack walk sees redsync's frames.
func answer(name string, cmd redis.Cmder, _ any) (any, error) {
	switch c := cmd.(type) {
	case *redis.BoolCmd:
		if name == "set" {
			c.SetVal(true)
			return true, nil
		}
	case *redis.StatusCmd:
		if name == "set" {
			c.SetVal("OK")
			return "OK", nil
		}
	case *redis.StringCmd: // SCRIPT LOAD: answer the source's SHA1
		args := cmd.Args()
		var buf [2 * sha1.Size]byte
		if name == "script" && len(args) == 3 && adapterkit.ScriptSHA1("eval", args[2], &buf) {
			c.SetVal(string(buf[:]))
			return nil, nil
		}
	case *redis.Cmd:
		var reply any
		switch name {
		case "evalsha":
			return nil, adapterkit.ErrNoScript
		case "eval":
			reply = probeDefaultReply
		case "set":
			reply = "OK"
		default:
			return nil, adapterkit.ErrUnsupported
		}
		c.SetVal(reply)
		return reply, nil
	}
	return nil, adapterkit.ErrUnsupported
}
