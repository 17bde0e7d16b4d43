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

// probeKeys are the keys of the probe's lock over several keys.
var probeKeys = []string{"lockwatch:probe:a", "lockwatch:probe:b", "lockwatch:probe:c"}

// multiObtainer is (*redislock.Client).ObtainMulti, which v0.10.0 added. The
// adapter asks for it at run time, so that it builds against v0.9.4 too.
type multiObtainer interface {
	ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opt *redislock.Options) (*redislock.Lock, error)
}

// linked returns the release whose scripts the linked redislock should send:
// v0.10.0 when its Client has ObtainMulti, v0.9.4 otherwise.
func linked() release {
	if _, ok := any((*redislock.Client)(nil)).(multiObtainer); ok {
		return v010
	}
	return v094
}

// Probe runs the linked redislock against a recording fake client (no
// server, no network): Obtain with a random token, Obtain again with a custom
// token and metadata, Refresh, TTL and Release; and when the linked redislock
// has ObtainMulti (v0.10.0), ObtainMulti over three keys, Refresh, TTL and
// Release of that lock. The fake answers every EVALSHA with NOSCRIPT, so
// redislock also sends each script's source with EVAL, and every EVAL as the
// scripts of the release that has ObtainMulti or not answer: refresh and
// release with 1 (v0.9.4) or OK (v0.10.0).
//
// Each call must send the script of that release the adapter classifies as
// the call's obtain, refresh or release (the keys of a lock over several in
// Keys), when it is answered and, asked before it is sent, as pending.
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

// The names of the probe's steps on a lock over several keys; the others are
// named after their script.
const (
	stepObtainMulti  = "obtain (ObtainMulti)"
	stepRefreshMulti = "refresh (several keys)"
	stepPTTLMulti    = "pttl (several keys)"
	stepReleaseMulti = "release (several keys)"
)

// probe runs the probe's steps against rec.
func (a *Adapter) probe(ctx context.Context, rec *adapterkit.Recorder[script]) error {
	rel := linked()
	done := rel.replies().Done() // what a refresh or release that did its work answers
	return rec.Probe(ctx, func(ctx context.Context, rdb *redis.Client) []adapterkit.Step[script] {
		c := redislock.New(rdb)
		// Each step runs one redislock call, must send the script of kind k
		// of the linked release (answered with reply when it comes with
		// EVAL) and checks what the adapter made of it, pending and answered.
		step := func(name string, k kind, reply any, run func() error, want func() registry.Action) adapterkit.Step[script] {
			if name == "" {
				name = k.String()
			}
			return adapterkit.Step[script]{Name: name, Script: script{k, rel}, Reply: reply, Run: run, Want: want, WantPending: want}
		}
		held := func(lock **redislock.Lock, keys []string, op registry.Op, ttl time.Duration) func() registry.Action {
			return func() registry.Action {
				l := *lock
				act := registry.Action{Op: op, Key: keys[0], Value: l.Token() + l.Metadata(), TTL: ttl}
				if len(keys) > 1 {
					act.Keys = append([]string(nil), keys...)
				}
				return act
			}
		}
		one := []string{probeKey}
		var lock *redislock.Lock
		steps := []adapterkit.Step[script]{
			step("", kindObtain, "OK", func() (err error) {
				lock, err = c.Obtain(ctx, probeKey, 10*time.Second, nil)
				return err
			}, held(&lock, one, registry.OpObtain, 10*time.Second)),
			step("", kindObtain, "OK", func() (err error) {
				lock, err = c.Obtain(ctx, probeKey, 15*time.Second, &redislock.Options{Token: probeToken, Metadata: probeMetadata})
				return err
			}, func() registry.Action {
				return registry.Action{Op: registry.OpObtain, Key: probeKey, Value: probeToken + probeMetadata, TTL: 15 * time.Second}
			}),
			step("", kindRefresh, done, func() error {
				return lock.Refresh(ctx, 20*time.Second, nil)
			}, held(&lock, one, registry.OpRefresh, 20*time.Second)),
			step("", kindPTTL, int64(20000), func() error {
				_, err := lock.TTL(ctx)
				return err
			}, nil),
			step("", kindRelease, done, func() error {
				return lock.Release(ctx)
			}, held(&lock, one, registry.OpRelease, 0)),
		}
		m, ok := any(c).(multiObtainer)
		if !ok {
			return steps
		}
		var multi *redislock.Lock
		return append(steps,
			step(stepObtainMulti, kindObtain, "OK", func() (err error) {
				multi, err = m.ObtainMulti(ctx, probeKeys, 10*time.Second, &redislock.Options{Metadata: probeMetadata})
				return err
			}, held(&multi, probeKeys, registry.OpObtain, 10*time.Second)),
			step(stepRefreshMulti, kindRefresh, done, func() error {
				return multi.Refresh(ctx, 25*time.Second, nil)
			}, held(&multi, probeKeys, registry.OpRefresh, 25*time.Second)),
			step(stepPTTLMulti, kindPTTL, int64(25000), func() error {
				_, err := multi.TTL(ctx)
				return err
			}, nil),
			step(stepReleaseMulti, kindRelease, done, func() error {
				return multi.Release(ctx)
			}, held(&multi, probeKeys, registry.OpRelease, 0)),
		)
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
