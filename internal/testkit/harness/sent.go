package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/scripts"
)

// SentCmd is one command that passed through a client, as its hook saw it.
type SentCmd struct {
	Seq  int       // 1 for the first command recorded, then 2, ...
	At   time.Time // when it was handed on towards the connection
	Args []string
}

// cmdOf is cmd as a SentCmd: its arguments as text (Seq and At zero).
func cmdOf(cmd redis.Cmder) SentCmd {
	raw := cmd.Args()
	args := make([]string, len(raw))
	for i, a := range raw {
		args[i] = fmt.Sprint(a)
	}
	return SentCmd{Args: args}
}

// IsRenew reports whether cmd calls the watchdog's renew script (see
// [SentCmd.IsRenew]); it looks at its first two arguments only.
func IsRenew(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	return SentCmd{Args: []string{fmt.Sprint(a[0]), fmt.Sprint(a[1])}}.IsRenew()
}

// Name is the command's name in lower case.
func (c SentCmd) Name() string {
	if len(c.Args) == 0 {
		return ""
	}
	return strings.ToLower(c.Args[0])
}

// Names reports whether key is among the command's arguments.
func (c SentCmd) Names(key string) bool { return len(c.Args) > 1 && slices.Contains(c.Args[1:], key) }

// IsRenew reports whether the command calls the watchdog's pinned,
// owner-checked renew script, by SHA1 (EVALSHA) or by source (EVAL).
func (c SentCmd) IsRenew() bool { return c.IsRenewBySHA1() || c.IsRenewBySource() }

// IsRenewBySHA1 reports whether the command is EVALSHA of the renew script.
func (c SentCmd) IsRenewBySHA1() bool {
	return c.Name() == "evalsha" && len(c.Args) > 1 && c.Args[1] == scripts.RenewSHA1
}

// IsRenewBySource reports whether the command is EVAL of the renew
// script's source (after NOSCRIPT).
func (c SentCmd) IsRenewBySource() bool {
	return c.Name() == "eval" && len(c.Args) > 1 && c.Args[1] == scripts.RenewSource()
}

// String shows the command, long arguments (a script's source) cut short.
func (c SentCmd) String() string {
	args := slices.Clone(c.Args)
	for i, a := range args {
		if len(a) > 40 {
			args[i] = a[:40] + "..."
		}
	}
	return strings.Join(args, " ")
}

// SentLog is a go-redis hook that records every command sent through a
// client, in order, with the time it was handed on (whether or not it
// reached a server). It is safe for concurrent use; install it with
// [Record].
type SentLog struct {
	mu   sync.Mutex // guards cmds
	cmds []SentCmd
}

var _ redis.Hook = (*SentLog)(nil)

// Record adds a [SentLog] to c's hooks (after those already added, so that
// it sees what they hand on) and returns it. Call it before c is used.
func Record(c redis.UniversalClient) *SentLog {
	s := &SentLog{}
	c.AddHook(s)
	return s
}

// DialHook is the next hook.
func (s *SentLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records cmd, then hands it on.
func (s *SentLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.add(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records each of cmds, then hands them on.
func (s *SentLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.add(c)
		}
		return next(ctx, cmds)
	}
}

func (s *SentLog) add(cmd redis.Cmder) {
	c := cmdOf(cmd)
	c.At = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Seq = len(s.cmds) + 1
	s.cmds = append(s.cmds, c)
}

// Mark returns the sequence number of the last command recorded.
func (s *SentLog) Mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cmds)
}

// After returns the commands recorded after mark (see Mark).
func (s *SentLog) After(mark int) []SentCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cmds[min(mark, len(s.cmds)):])
}

// Since returns the commands handed on at t or later.
func (s *SentLog) Since(t time.Time) []SentCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SentCmd
	for _, c := range s.cmds {
		if !c.At.Before(t) {
			out = append(out, c)
		}
	}
	return out
}

// LastRenewal returns when the last renew script call naming key was
// handed on at or after from and before before, or from when none was: a
// renewal sent before a lock's earliest expiry that got no answer may have
// been applied, and its key may live a TTL past it (I12).
func (s *SentLog) LastRenewal(key string, from, before time.Time) time.Time {
	last := from
	for _, c := range s.Since(from) {
		if c.At.Before(before) && c.IsRenew() && c.Names(key) {
			last = c.At
		}
	}
	return last
}

// Describe lists cmds one a line, with the time each was handed on.
func Describe(cmds []SentCmd) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n  %s %s", c.At.Format("15:04:05.000000"), c)
	}
	return b.String()
}
