package goredsync

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// The fuzz input encodes a command's arguments after the name as a sequence
// of tagged values, so that the fuzzer mixes argument types:
//
//	tagString n bytes...   a string of n bytes
//	tagBytes n bytes...    a []byte of n bytes
//	tagInt 8 bytes         an int
//	tagNil                 nil
//	tagFloat 8 bytes       a float64
//	tagSHA i               the i-th pinned SHA1, as a string
//	tagSource i            the EVAL source of the i-th pinned script, as a string
//	tagUint 8 bytes        a uint64
const (
	tagString byte = iota
	tagBytes
	tagInt
	tagNil
	tagFloat
	tagSHA
	tagSource
	tagUint
	numTags
)

var (
	fuzzNames   = []string{"evalsha", "eval", "set", "SET", ""}
	fuzzReplies = []any{nil, "OK", int64(1), int64(0), int64(-1), true, false, "1", []any{int64(1)}}
	fuzzErrors  = []error{nil, redis.Nil, adapterkit.ErrNoScript, errors.New("i/o timeout")}
)

type fuzzCodec struct {
	shas    []string // pinned SHA1s, in pins order
	sources []string // their EVAL sources
}

func newFuzzCodec(t testing.TB) fuzzCodec {
	t.Helper()
	src := upstreamSources(t)
	var c fuzzCodec
	for _, p := range pins {
		c.shas = append(c.shas, p.SHA1)
		c.sources = append(c.sources, src[p.Script])
	}
	return c
}

func (c fuzzCodec) decode(data []byte) []any {
	var args []any
	for len(data) > 0 {
		tag := data[0] % numTags
		data = data[1:]
		switch tag {
		case tagString, tagBytes:
			if len(data) == 0 {
				return args
			}
			n := min(int(data[0]), len(data)-1)
			b := data[1 : 1+n]
			data = data[1+n:]
			if tag == tagString {
				args = append(args, string(b))
			} else {
				args = append(args, append([]byte(nil), b...))
			}
		case tagInt, tagFloat, tagUint:
			if len(data) < 8 {
				return args
			}
			u := binary.BigEndian.Uint64(data)
			data = data[8:]
			switch tag {
			case tagInt:
				args = append(args, int(int64(u)))
			case tagFloat:
				args = append(args, math.Float64frombits(u))
			default:
				args = append(args, u)
			}
		case tagNil:
			args = append(args, nil)
		case tagSHA, tagSource:
			if len(data) == 0 {
				return args
			}
			i := int(data[0]) % len(c.shas)
			data = data[1:]
			if tag == tagSHA {
				args = append(args, c.shas[i])
			} else {
				args = append(args, c.sources[i])
			}
		}
	}
	return args
}

func (c fuzzCodec) encode(args ...any) []byte {
	var out []byte
	index := func(list []string, s string) int {
		for i, x := range list {
			if x == s {
				return i
			}
		}
		return -1
	}
	for _, a := range args {
		switch v := a.(type) {
		case string:
			if i := index(c.shas, v); i >= 0 {
				out = append(out, tagSHA, byte(i))
			} else if i := index(c.sources, v); i >= 0 {
				out = append(out, tagSource, byte(i))
			} else {
				out = append(out, tagString, byte(len(v)))
				out = append(out, v...)
			}
		case []byte:
			out = append(out, tagBytes, byte(len(v)))
			out = append(out, v...)
		case int:
			out = binary.BigEndian.AppendUint64(append(out, tagInt), uint64(v))
		case float64:
			out = binary.BigEndian.AppendUint64(append(out, tagFloat), math.Float64bits(v))
		case uint64:
			out = binary.BigEndian.AppendUint64(append(out, tagUint), v)
		case nil:
			out = append(out, tagNil)
		default:
			panic("fuzz encode: unsupported type")
		}
	}
	return out
}

// pinnedScript tells, independently of the adapter, which pinned script the
// arguments name.
func pinnedScript(name string, args []any) script {
	if len(args) < 2 {
		return scriptUnknown
	}
	var s string
	switch v := args[1].(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return scriptUnknown
	}
	switch name {
	case "evalsha":
		s = strings.ToLower(s)
	case "eval":
		sum := sha1.Sum([]byte(s))
		s = hex.EncodeToString(sum[:])
	default:
		return scriptUnknown
	}
	for _, p := range pins {
		if p.SHA1 == s {
			return p.Script
		}
	}
	return scriptUnknown
}

func FuzzClassify(f *testing.F) {
	c := newFuzzCodec(f)
	src := upstreamSources(f)
	seeds := []struct {
		name, reply, err uint8
		args             []any
	}{
		{2, 5, 0, []any{"job:1", "v1", "ex", 8, "nx"}},
		{2, 5, 0, []any{"job:1", "v1", "px", 2500, "nx"}},
		{3, 1, 0, []any{"job:1", "v1", "NX", "PX", "1000"}},
		{2, 6, 0, []any{"job:1", "v1", "px", 2500, "nx"}},
		{0, 2, 0, []any{deleteSHA1, 1, "job:1", "v1"}},
		{1, 4, 0, []any{src[scriptDelete], 1, "job:1", "v1"}},
		{0, 0, 2, []any{touchSHA1, 1, "job:1", "v1", 8000}},
		{1, 2, 0, []any{src[scriptTouch], 1, "job:1", "v1", 8000}},
		{0, 3, 0, []any{touchWithSetNXSHA1, 1, "job:1", []byte("v1"), "2500"}},
		{1, 2, 0, []any{src[scriptTouchWithSetNX], 1.0, "job:1", nil, uint64(8000)}},
	}
	for _, s := range seeds {
		f.Add(s.name, s.reply, s.err, c.encode(s.args...))
	}
	a := New()
	f.Fuzz(func(t *testing.T, nameSel, replySel, errSel uint8, data []byte) {
		name := fuzzNames[int(nameSel)%len(fuzzNames)]
		args := append([]any{name}, c.decode(data)...)
		cmd := registry.Command{
			Name:  strings.ToLower(name),
			Args:  args,
			Reply: fuzzReplies[int(replySel)%len(fuzzReplies)],
			Err:   fuzzErrors[int(errSel)%len(fuzzErrors)],
		}
		got := a.Classify(cmd)
		s := pinnedScript(cmd.Name, args)
		switch {
		case got.Op == registry.OpNone:
		case cmd.Name == "set":
			t.Fatalf("Classify(%v) from a test = %+v, want OpNone: only redsync's SET NX is a lock", args, got)
		case s == scriptUnknown:
			t.Fatalf("Classify(%v) = %+v for an unpinned script, want OpNone", args, got)
		case got.Op == registry.OpObtain:
			t.Fatalf("Classify(%v) = %+v, want no obtain from a script", args, got)
		case got.Op == registry.OpRefresh && (s == scriptDelete || cmd.Err != nil || got.TTL <= 0):
			t.Fatalf("Classify(%v, err %v) = %+v, want no refresh", args, cmd.Err, got)
		case got.Op == registry.OpNotHeld && (s == scriptDelete || cmd.Err != nil):
			t.Fatalf("Classify(%v, err %v) = %+v, want no not-held", args, cmd.Err, got)
		case got.Key != textOf(args[3]) || got.Value != textOf(args[4]):
			t.Fatalf("Classify(%v) = %+v, want key and value from the arguments", args, got)
		}
		// What Classify would make of a SET sent by redsync.
		if key, value, ttl, ok := parseSet(args); ok {
			if ttl <= 0 || ttl%time.Millisecond != 0 || key != textOf(args[1]) || value != textOf(args[2]) {
				t.Fatalf("parseSet(%v) = %q, %q, %v, want the key, value and a positive TTL from the arguments", args, key, value, ttl)
			}
		}
	})
}

func textOf(a any) string {
	s, _ := adapterkit.Text(a)
	return s
}
