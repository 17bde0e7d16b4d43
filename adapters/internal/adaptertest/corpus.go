package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Captured is one SET, EVAL or EVALSHA an upstream library sent through a
// go-redis client, with what the server answered, as a [Capture] hook saw it
// after the command ran.
type Captured struct {
	Args  []any // a copy
	Reply any   // as the registry hook reads it
	Err   error
}

// Capture records the SET, EVAL and EVALSHA commands of the client it is
// added to (with AddHook), pipelines included. It is safe for concurrent use.
type Capture struct {
	mu  sync.Mutex // guards got
	got []Captured
}

var _ redis.Hook = (*Capture)(nil)

// DialHook returns next.
func (h *Capture) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records each lock-shaped command after it ran.
func (h *Capture) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.add(cmd, err)
		return err
	}
}

// ProcessPipelineHook records each lock-shaped command after it ran.
func (h *Capture) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.add(cmd, cmd.Err())
		}
		return err
	}
}

func (h *Capture) add(cmd redis.Cmder, err error) {
	args := cmd.Args()
	if len(args) == 0 {
		return
	}
	switch name, _ := args[0].(string); strings.ToLower(name) {
	case "set", "eval", "evalsha":
	default:
		return
	}
	c := Captured{Args: append([]any(nil), args...), Err: err}
	switch v := cmd.(type) {
	case *redis.Cmd:
		c.Reply = v.Val()
	case *redis.BoolCmd:
		c.Reply = v.Val()
	case *redis.StatusCmd:
		c.Reply = v.Val()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, c)
}

// Take returns what was recorded since the last Take and forgets it.
func (h *Capture) Take() []Captured {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	return got
}

// Seed returns the fuzz input of FuzzClassify (names [FuzzNames]) that
// decodes to the captured command: its name and spelling, its arguments, and
// the reply and error it was answered with (a PTTL reading as the one
// reading in the list). It fails t when the codec cannot represent the
// command, so that an upstream release sending argument types the fuzz input
// cannot express is noticed.
func (c Codec) Seed(t testing.TB, cmd Captured) (nameSel, caseSel, replySel, errSel uint8, data []byte) {
	t.Helper()
	raw, _ := cmd.Args[0].(string)
	nameSel = uint8(indexOf(FuzzNames, strings.ToLower(raw)))
	for i := 0; i < len(raw) && i < 7; i++ {
		if 'A' <= raw[i] && raw[i] <= 'Z' {
			caseSel |= 1 << i
		}
	}
	reply := cmd.Reply
	if n, ok := reply.(int64); ok && n > 1 {
		reply = int64(9500)
	}
	r := -1
	for i, x := range fuzzReplies {
		if reflect.DeepEqual(x, reply) {
			r = i
		}
	}
	var e int
	switch {
	case cmd.Err == nil:
		e = 0
	case errors.Is(cmd.Err, redis.Nil):
		e = 1
	case redis.HasErrorPrefix(cmd.Err, "NOSCRIPT"):
		e = 2
	default:
		e = -1
	}
	data = c.Encode(cmd.Args[1:]...)
	got := c.CommandCase(FuzzNames, nameSel, caseSel, uint8(max(r, 0)), uint8(max(e, 0)), data)
	if nameSel == 255 || r < 0 || e < 0 || !reflect.DeepEqual(got.Args, cmd.Args) {
		t.Fatalf("the fuzz input cannot express %v answered %T(%v), %v: it decodes to %v", cmd.Args, cmd.Reply, cmd.Reply, cmd.Err, got.Args)
	}
	return nameSel, caseSel, uint8(r), uint8(e), data
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// WriteCorpus writes one seed corpus file of a fuzz test taking (uint8,
// uint8, uint8, uint8, []byte) in the "go test fuzz v1" format: dir is
// testdata/fuzz/<FuzzName> and name the file's name.
func WriteCorpus(t testing.TB, dir, name string, nameSel, caseSel, replySel, errSel uint8, data []byte) {
	t.Helper()
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range []byte{nameSel, caseSel, replySel, errSel} {
		fmt.Fprintf(&b, "byte(%q)\n", v)
	}
	fmt.Fprintf(&b, "[]byte(%q)\n", data)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// CorpusEnv names the environment variable that makes an adapter's
// TestFuzzCorpus write the seed corpus.
const CorpusEnv = "LOCKWATCH_WRITE_CORPUS"

// SeedCorpus returns the directory of FuzzClassify's seed corpus and
// whether TestFuzzCorpus should write it (CorpusEnv=1); when it should, the
// files whose names start with prefix are removed first.
func SeedCorpus(t testing.TB, prefix string) (dir string, write bool) {
	t.Helper()
	dir = filepath.Join("testdata", "fuzz", "FuzzClassify")
	if os.Getenv(CorpusEnv) != "1" {
		return dir, false
	}
	old, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	return dir, true
}
