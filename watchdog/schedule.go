package watchdog

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// minEvery is the shortest "@every" interval WithSchedule accepts.
const minEvery = time.Millisecond

// specParser parses cron specs: five fields, six with leading seconds, or a
// descriptor.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSchedule parses a WithSchedule spec. "@every <duration>" is parsed
// here rather than by robfig/cron, which rounds intervals to whole seconds
// (so "@every 10ms" would tick once a second and "@every 1500ms" every
// second) and accepts zero and negative intervals.
func parseSchedule(spec string) (cron.Schedule, error) {
	if rest, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("watchdog: WithSchedule(%q): %w", spec, err)
		}
		if d < minEvery {
			return nil, fmt.Errorf("watchdog: WithSchedule(%q): %w", spec, errors.New("the interval must be at least 1ms"))
		}
		return every(d), nil
	}
	s, err := specParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("watchdog: WithSchedule(%q): %w", spec, err)
	}
	return s, nil
}

// every ticks at a fixed interval, exactly.
type every time.Duration

func (e every) Next(t time.Time) time.Time { return t.Add(time.Duration(e)) }
