package adaptertest

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"

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
	fuzzReplies = []any{nil, "OK", int64(1), int64(0), int64(-1), true, false, "1", []any{int64(1)}}
	fuzzErrors  = []error{nil, redis.Nil, adapterkit.ErrNoScript, errors.New("i/o timeout")}
)

// Codec encodes and decodes the fuzz input of an adapter's FuzzClassify.
type Codec struct {
	shas    []string // pinned SHA1s, in pins order
	sources []string // their EVAL sources
}

// NewCodec returns the codec of the given pins, whose EVAL sources are in
// sources.
func NewCodec[S comparable](pins []adapterkit.Pin[S], sources map[S]string) Codec {
	var c Codec
	for _, p := range pins {
		c.shas = append(c.shas, p.SHA1)
		c.sources = append(c.sources, sources[p.Script])
	}
	return c
}

// Decode returns the arguments data encodes; it stops at a truncated value.
func (c Codec) Decode(data []byte) []any {
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

// Encode returns the input that decodes to args: strings (pinned SHA1s and
// sources by index), []byte, int, float64, uint64 and nil.
func (c Codec) Encode(args ...any) []byte {
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

// Command returns the command a fuzz input selects: the name names[nameSel]
// as it is (also as the first argument), the arguments data decodes to, and
// one of a few replies and errors.
func (c Codec) Command(names []string, nameSel, replySel, errSel uint8, data []byte) registry.Command {
	name := names[int(nameSel)%len(names)]
	return registry.Command{
		Name:  name,
		Args:  append([]any{name}, c.Decode(data)...),
		Reply: fuzzReplies[int(replySel)%len(fuzzReplies)],
		Err:   fuzzErrors[int(errSel)%len(fuzzErrors)],
	}
}

// PinnedScript tells, independently of the adapter and of adapterkit, which
// of pins the arguments of an EVALSHA or EVAL named name name.
func PinnedScript[S comparable](pins []adapterkit.Pin[S], name string, args []any) S {
	var unknown S
	if len(args) < 2 {
		return unknown
	}
	var s string
	switch v := args[1].(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return unknown
	}
	switch name {
	case "evalsha":
		s = strings.ToLower(s)
	case "eval":
		sum := sha1.Sum([]byte(s))
		s = hex.EncodeToString(sum[:])
	default:
		return unknown
	}
	for _, p := range pins {
		if p.SHA1 == s {
			return p.Script
		}
	}
	return unknown
}

// Text returns a string or []byte argument as a string, and "" for any
// other.
func Text(a any) string {
	s, _ := adapterkit.Text(a)
	return s
}
