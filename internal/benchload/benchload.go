// Package benchload measures HTTP endpoints against each other on a shared,
// noisy machine: the candidates are loaded in alternating short rounds, so
// that whatever else the machine does falls on all of them alike, and only
// their ratio is read. The API benchmarks (bench/) and the scale run on a
// real kube-apiserver (bench/scale) use it.
package benchload

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Target is one endpoint: a URL, the headers to send, and the Host to
// ask for if not the URL's (sites told apart by name on one listener).
type Target struct {
	URL    string
	Header http.Header
	Host   string
}

// Result is what Alternate measured for one target.
type Result struct {
	// PerSec is requests per second over all its rounds.
	PerSec float64
	// Requests is how many were answered, Bytes the length of the last
	// body.
	Requests int64
	Bytes    int64
	// Rounds is the rate of each round.
	Rounds []float64
	// PerCPUSec is requests per second of this process's CPU time over
	// all its rounds, and CPURounds the same for each round: with the
	// server under test in the process (integration/wake), what the
	// requests cost, whatever share of the cores other processes took.
	// Zero where the process's CPU time is not known.
	PerCPUSec float64
	CPURounds []float64
}

// Ratio is the median over the rounds of a's rate over b's in the same
// round (Alternate's rounds of a and b run back to back): a burst of
// other work, which lands on one of them, moves it less than it moves
// the ratio of totals.
func Ratio(a, b Result) float64 {
	return median(ratios(a.Rounds, b.Rounds))
}

// CPURatio is Ratio of the rates per second of CPU time.
func CPURatio(a, b Result) float64 {
	return median(ratios(a.CPURounds, b.CPURounds))
}

// median of sorted r.
func median(r []float64) float64 {
	n := len(r)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return r[n/2]
	}
	return (r[n/2-1] + r[n/2]) / 2
}

// ratios are the rounds' ratios of a over b, sorted.
func ratios(a, b []float64) []float64 {
	n := min(len(a), len(b))
	r := make([]float64, n)
	for i := range r {
		r[i] = a[i] / b[i]
	}
	slices.Sort(r)
	return r
}

// Client returns an HTTP client for n parallel connections to one host.
func Client(n int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n, DisableCompression: true}, Timeout: time.Minute}
}

// Alternate loads the targets in turn, rounds times over, each round a
// fixed number of requests spread over conc parallel clients, and returns
// their throughput in the order given. Rounds of whole requests keep a
// slow answer in flight at the end of a round from skewing it. Any answer
// other than 200 fails it.
//
// Each target's rounds are sized from its rate under conc parallel
// clients (a burst of 16 requests per client), so that a round lasts
// about round however many clients share the cores; sized from one
// request alone, rounds of 32 clients on 2 cores lasted ~6 s instead of a
// quarter second. Short rounds put the two halves of a pair close in
// time: other work on the machine, which comes and goes over seconds,
// then lands on both alike.
func Alternate(c *http.Client, conc, rounds int, round time.Duration, targets ...Target) ([]Result, error) {
	per := make([]int, len(targets))
	for i, t := range targets {
		n := 16 * conc
		_, d, err := load(c, conc, n, t)
		if err != nil {
			return nil, err
		}
		per[i] = max(4*conc, int(float64(n)*round.Seconds()/d.Seconds()))
	}
	return alternate(c, conc, rounds, per, targets)
}

// alternate runs the rounds, per[i] requests of targets[i] each.
func alternate(c *http.Client, conc, rounds int, per []int, targets []Target) ([]Result, error) {
	out := make([]Result, len(targets))
	spent := make([]time.Duration, len(targets))
	cpu := make([]time.Duration, len(targets))
	for r := 0; r < rounds; r++ {
		for k := range targets {
			// Every other round runs them in reverse: none goes first each
			// time.
			i := k
			if r%2 == 1 {
				i = len(targets) - 1 - k
			}
			cpu0 := processCPU()
			b, d, err := load(c, conc, per[i], targets[i])
			if err != nil {
				return nil, err
			}
			used := processCPU() - cpu0
			out[i].Requests += int64(per[i])
			out[i].Bytes = b
			out[i].Rounds = append(out[i].Rounds, float64(per[i])/d.Seconds())
			if used > 0 {
				out[i].CPURounds = append(out[i].CPURounds, float64(per[i])/used.Seconds())
			}
			spent[i] += d
			cpu[i] += used
		}
	}
	for i := range out {
		out[i].PerSec = float64(out[i].Requests) / spent[i].Seconds()
		if cpu[i] > 0 {
			out[i].PerCPUSec = float64(out[i].Requests) / cpu[i].Seconds()
		}
	}
	return out, nil
}

// Spread is the lower and upper quartile of the rounds' ratios of a over
// b (Ratio is their median).
func Spread(a, b Result) (lo, hi float64) {
	r := ratios(a.Rounds, b.Rounds)
	if len(r) == 0 {
		return 0, 0
	}
	return r[len(r)/4], r[(3*len(r))/4]
}

// load makes n requests of t with conc clients and returns the length of a
// body and the time they took.
func load(c *http.Client, conc, n int, t Target) (body int64, took time.Duration, err error) {
	var (
		left, size atomic.Int64
		wg         sync.WaitGroup
		once       sync.Once
		firstErr   error
	)
	left.Store(int64(n))
	start := time.Now()
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				b, err := Get(c, t)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				size.Store(int64(b))
			}
		}()
	}
	wg.Wait()
	return size.Load(), time.Since(start), firstErr
}

// Get fetches t once and returns the body's length; a status other than
// 200 is an error.
func Get(c *http.Client, t Target) (int, error) {
	req, err := http.NewRequest(http.MethodGet, t.URL, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range t.Header {
		req.Header[k] = v
	}
	if t.Host != "" {
		req.Host = t.Host
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return 0, err
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", t.URL, res.Status)
	}
	return int(n), nil
}

// Latency is the median time of one request with nothing else in flight,
// n requests per target, taken alternately.
func Latency(c *http.Client, n int, targets ...Target) ([]time.Duration, error) {
	samples := make([][]time.Duration, len(targets))
	for r := 0; r < n; r++ {
		for i, t := range targets {
			start := time.Now()
			if _, err := Get(c, t); err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], time.Since(start))
		}
	}
	out := make([]time.Duration, len(targets))
	for i, s := range samples {
		slices.Sort(s)
		out[i] = s[len(s)/2]
	}
	return out, nil
}
