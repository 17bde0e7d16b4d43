package bsmredislock

import (
	"context"
	"time"

	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

const (
	probeKey      = "lockwatch:probe"
	probeToken    = "lockwatch-probe-token"
	probeMetadata = "lockwatch-probe-metadata"
)

// Probe runs the linked redislock against a recording fake client (no
// server, no network): Obtain with a random token, Obtain again with a custom
// token and metadata, Refresh, TTL and Release. The fake answers every
// EVALSHA with NOSCRIPT, so redislock also sends each script's source with
// EVAL.
//
// Probe returns an *[registry.UpstreamChangedError] naming every script whose
// SHA1 is not pinned, and a plain error when a step sent no command the
// adapter recognises or redislock failed against the fake. It is safe for
// concurrent use.
func (a *Adapter) Probe(ctx context.Context) error { return a.probe(ctx, a.recorder()) }

// recorder returns the probe's fake Redis for a.
func (a *Adapter) recorder() *adapterkit.Recorder[script] {
	return &adapterkit.Recorder[script]{
		Package: "bsmredislock", Library: Library, Pins: a.table(), Classify: a.Classify, Answer: answer,
	}
}

// probe runs the probe's steps against rec.
func (a *Adapter) probe(ctx context.Context, rec *adapterkit.Recorder[script]) error {
	return rec.Probe(ctx, func(ctx context.Context, rdb *redis.Client) []adapterkit.Step[script] {
		c := redislock.New(rdb)
		// Each step runs one redislock call, must send its script (answered
		// with reply when it comes with EVAL) and checks what the adapter
		// made of it.
		step := func(s script, reply any, run func() error, want func() registry.Action) adapterkit.Step[script] {
			return adapterkit.Step[script]{Name: s.String(), Script: s, Reply: reply, Run: run, Want: want}
		}
		var lock *redislock.Lock
		return []adapterkit.Step[script]{
			step(scriptObtain, "OK", func() (err error) {
				lock, err = c.Obtain(ctx, probeKey, 10*time.Second, nil)
				return err
			}, func() registry.Action {
				return registry.Action{Op: registry.OpObtain, Key: probeKey, Value: lock.Token() + lock.Metadata(), TTL: 10 * time.Second}
			}),
			step(scriptObtain, "OK", func() (err error) {
				lock, err = c.Obtain(ctx, probeKey, 15*time.Second, &redislock.Options{Token: probeToken, Metadata: probeMetadata})
				return err
			}, func() registry.Action {
				return registry.Action{Op: registry.OpObtain, Key: probeKey, Value: probeToken + probeMetadata, TTL: 15 * time.Second}
			}),
			step(scriptRefresh, int64(1), func() error {
				return lock.Refresh(ctx, 20*time.Second, nil)
			}, func() registry.Action {
				return registry.Action{Op: registry.OpRefresh, Key: probeKey, Value: probeToken + probeMetadata, TTL: 20 * time.Second}
			}),
			step(scriptPTTL, int64(20000), func() error {
				_, err := lock.TTL(ctx)
				return err
			}, nil),
			step(scriptRelease, int64(1), func() error {
				return lock.Release(ctx)
			}, func() registry.Action {
				return registry.Action{Op: registry.OpRelease, Key: probeKey, Value: probeToken + probeMetadata}
			}),
		}
	})
}

// answer is the fake Redis redislock talks to: NOSCRIPT to every EVALSHA, the
// step's reply to EVAL, an error to anything else.
func answer(name string, cmd redis.Cmder, reply any) (any, error) {
	switch name {
	case "evalsha":
		return nil, adapterkit.ErrNoScript
	case "eval":
		c, ok := cmd.(*redis.Cmd)
		if !ok {
			return nil, nil
		}
		c.SetVal(reply)
		return c.Val(), nil
	}
	return nil, adapterkit.ErrUnsupported
}
