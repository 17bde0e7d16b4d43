package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// journalScript appends one event to a run's journal, a Redis list, stamped
// with the server's clock (TIME); at the start of a job run it also numbers
// the run. A script runs as one atomic step on the one server every replica
// writes to, so the journal's order is the order in which the events
// happened: the check reads overlaps from that order, not from timestamps of
// several machines' clocks, and the timestamps only serve the summary.
//
// KEYS[1] is the journal, KEYS[2] a hash of the last run number of each job.
// ARGV: "start" or "end", the job, the replica, the run's number (at the
// end), a note (at the end). It returns the run's number.
var journalScript = redis.NewScript(`
local t = redis.call('TIME')
local n = ARGV[4]
if ARGV[1] == 'start' then
  n = redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
end
redis.call('RPUSH', KEYS[1], table.concat({ARGV[1], ARGV[2], ARGV[3], tostring(n), t[1], t[2], ARGV[5] or ''}, '\t'))
redis.call('PEXPIRE', KEYS[1], 3600000)
redis.call('PEXPIRE', KEYS[2], 3600000)
return n
`)

// journal is where the replicas of one run write what their job runs do.
type journal struct {
	rdb    redis.Cmdable
	list   string // KEYS[1]
	runs   string // KEYS[2]
	stalls string // the replicas' stalls (stallProbe), written as they exit
}

func newJournal(rdb redis.Cmdable, runID string) journal {
	prefix := "lockwatch-example:gocron:" + runID
	return journal{rdb: rdb, list: prefix + ":journal", runs: prefix + ":runs", stalls: prefix + ":stalls"}
}

// writeStalls records the times replica's process stood still.
func (j journal) writeStalls(ctx context.Context, replica int, ss []stall) error {
	if len(ss) == 0 {
		return nil
	}
	lines := make([]any, len(ss))
	for i, st := range ss {
		lines[i] = fmt.Sprintf("%d\t%d\t%d", replica, st.End.UnixMicro(), st.Length.Microseconds())
	}
	pipe := j.rdb.TxPipeline()
	pipe.RPush(ctx, j.stalls, lines...)
	pipe.PExpire(ctx, j.stalls, time.Hour)
	_, err := pipe.Exec(ctx)
	return err
}

// readStalls returns every replica's stalls, by replica.
func (j journal) readStalls(ctx context.Context) (map[int][]stall, error) {
	lines, err := j.rdb.LRange(ctx, j.stalls, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := map[int][]stall{}
	for _, line := range lines {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("stall entry malformed: %q", line)
		}
		var nums [3]int64
		for i, v := range f {
			if nums[i], err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("stall entry malformed: %q: %w", line, err)
			}
		}
		r := int(nums[0])
		out[r] = append(out[r], stall{End: time.UnixMicro(nums[1]), Length: time.Duration(nums[2]) * time.Microsecond})
	}
	return out, nil
}

// start records that replica starts a run of job, and returns the run's
// number (1, 2, ... for each job, across the replicas).
func (j journal) start(ctx context.Context, job string, replica int) (int, error) {
	return journalScript.Run(ctx, j.rdb, []string{j.list, j.runs}, "start", job, replica, "", "").Int()
}

// end records that the run numbered n of job, on replica, has ended; note
// says how ("done", or why it stopped early).
func (j journal) end(ctx context.Context, job string, replica, n int, note string) error {
	return journalScript.Run(ctx, j.rdb, []string{j.list, j.runs}, "end", job, replica, n, note).Err()
}

// read returns the journal's events, in the order they happened.
func (j journal) read(ctx context.Context) ([]event, error) {
	lines, err := j.rdb.LRange(ctx, j.list, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	events := make([]event, 0, len(lines))
	for i, line := range lines {
		e, err := parseEvent(line)
		if err != nil {
			return nil, fmt.Errorf("journal entry %d: %w", i, err)
		}
		events = append(events, e)
	}
	return events, nil
}

// remove deletes the run's keys.
func (j journal) remove(ctx context.Context) error {
	return j.rdb.Del(ctx, j.list, j.runs, j.stalls).Err()
}

// event is one journal entry: a job run started or ended.
type event struct {
	Start   bool // a start; an end otherwise
	Job     string
	Replica int
	Run     int
	At      time.Time // Redis's clock
	Note    string    // at an end: "done", or why the run stopped early
}

func parseEvent(line string) (event, error) {
	f := strings.Split(line, "\t")
	if len(f) != 7 || (f[0] != "start" && f[0] != "end") {
		return event{}, fmt.Errorf("malformed: %q", line)
	}
	var nums [4]int64
	for i, s := range []string{f[2], f[3], f[4], f[5]} {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return event{}, fmt.Errorf("malformed: %q: %w", line, err)
		}
		nums[i] = v
	}
	return event{
		Start:   f[0] == "start",
		Job:     f[1],
		Replica: int(nums[0]),
		Run:     int(nums[1]),
		At:      time.Unix(nums[2], nums[3]*1000),
		Note:    f[6],
	}, nil
}

// run is one run of a job, as the journal tells it.
type run struct {
	Job     string
	Replica int
	N       int
	Start   time.Time
	End     time.Time // zero while unfinished
	Note    string
}

func (r *run) length() time.Duration { return r.End.Sub(r.Start) }

func (r *run) String() string {
	return fmt.Sprintf("run %d of %s on replica %d", r.N, r.Job, r.Replica)
}

// overlap is a run that started while another run of the same job was
// still running.
type overlap struct {
	Later, Earlier *run
	// Stall: the earlier run's process stood still this long while it
	// held the lock (excuse); zero when it did not.
	Stall time.Duration
}

// summary is what the journal of one scenario shows.
type summary struct {
	Replicas int
	Expiry   time.Duration
	Origin   time.Time // the first event
	Runs     []*run    // in the order they started
	Overlaps []overlap // at most one per run: a run that started while others of its job ran
	// Excused: overlaps whose earlier run's process stood still long
	// enough to lose its lock whatever renews it (excuse); not in Overlaps.
	Excused    []overlap
	Unfinished int // runs with a start and no end
	Outlived   int // finished runs longer than the locks' expiry
	Stopped    int // runs that stopped early: lockwatch told them their lock may be lost
}

// analyze replays the journal. A run overlaps when it starts while another
// run of the same job has started and not yet ended, whichever replica runs
// them: exactly what a distributed lock on the job is there to prevent.
// Each overlapping run is counted once, paired with the earliest run it
// overlapped.
func analyze(events []event, replicas int, expiry time.Duration) *summary {
	s := &summary{Replicas: replicas, Expiry: expiry}
	if len(events) > 0 {
		s.Origin = events[0].At
	}
	type id struct {
		job string
		n   int
	}
	open := map[string][]*run{} // job -> runs under way, in start order
	byID := map[id]*run{}
	for _, e := range events {
		if e.Start {
			r := &run{Job: e.Job, Replica: e.Replica, N: e.Run, Start: e.At}
			if under := open[e.Job]; len(under) > 0 {
				s.Overlaps = append(s.Overlaps, overlap{Later: r, Earlier: under[0]})
			}
			open[e.Job] = append(open[e.Job], r)
			byID[id{e.Job, e.Run}] = r
			s.Runs = append(s.Runs, r)
			continue
		}
		r := byID[id{e.Job, e.Run}]
		if r == nil || !r.End.IsZero() {
			continue // an end without its start: not written by this program
		}
		r.End, r.Note = e.At, e.Note
		under := open[e.Job]
		for i, u := range under {
			if u == r {
				open[e.Job] = append(under[:i:i], under[i+1:]...)
				break
			}
		}
		if r.length() > expiry {
			s.Outlived++
		}
		if strings.HasPrefix(r.Note, stoppedPrefix) {
			s.Stopped++
		}
	}
	for _, under := range open {
		s.Unfinished += len(under)
	}
	return s
}

// jobStats is one line of the summary's table.
type jobStats struct {
	Job         string
	Runs        int
	PerReplica  map[int]int
	Longest     time.Duration
	Outlived    int
	Overlapping int
}

// byJob returns a line per job, by name.
func (s *summary) byJob() []jobStats {
	m := map[string]*jobStats{}
	get := func(job string) *jobStats {
		if m[job] == nil {
			m[job] = &jobStats{Job: job, PerReplica: map[int]int{}}
		}
		return m[job]
	}
	for _, r := range s.Runs {
		j := get(r.Job)
		j.Runs++
		j.PerReplica[r.Replica]++
		if !r.End.IsZero() {
			j.Longest = max(j.Longest, r.length())
			if r.length() > s.Expiry {
				j.Outlived++
			}
		}
	}
	for _, o := range s.Overlaps {
		get(o.Later.Job).Overlapping++
	}
	out := make([]jobStats, 0, len(m))
	for _, j := range m {
		out = append(out, *j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Job < out[b].Job })
	return out
}

// since formats t relative to the journal's first event.
func (s *summary) since(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(s.Origin).Seconds())
}

// excuse moves out of s.Overlaps each overlap whose earlier run's process
// stood still, while that run held the lock and before the later run
// started, for two thirds of the lock's expiry or more (stalls, by
// replica). A watchdog renews a lock when a third of its expiry has passed,
// so that its key always has two thirds left: a holder whose whole process
// stands still longer than that loses its lock whatever renews it, with
// nothing in the process able to act (the README's "What no watchdog can
// do": fencing). Such an overlap is reported, not judged. The stalls'
// times are the replica's clock, the runs' the Redis server's: the same
// machine's clock in the tests and in CI.
func (s *summary) excuse(stalls map[int][]stall) {
	kept := s.Overlaps[:0]
	for _, o := range s.Overlaps {
		for _, st := range stalls[o.Earlier.Replica] {
			from := st.End.Add(-st.Length)
			if st.Length >= s.Expiry*2/3 && st.End.After(o.Earlier.Start) && from.Before(o.Later.Start) {
				o.Stall = max(o.Stall, st.Length)
			}
		}
		if o.Stall > 0 {
			s.Excused = append(s.Excused, o)
		} else {
			kept = append(kept, o)
		}
	}
	s.Overlaps = kept
}
