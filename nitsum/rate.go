package nitsum

import (
	"fmt"
	"sync"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

// DefaultWindow is the control window of the paper (§3.3.1, default 1 s).
const DefaultWindow = time.Second

// Meter measures each tier's arrival rate over the last complete control
// window, the planner's λ_s (pitfall 7: the past window, not the one in
// progress). Windows are [start + k·window, start + (k+1)·window) from the
// meter's creation. It reads time only through its clock and is safe for
// concurrent use.
type Meter struct {
	clk    clock.Clock
	window time.Duration

	mu    sync.Mutex
	start time.Time // the start of the window in progress
	cur   []int64   // arrivals per tier in the window in progress
	last  []float64 // req/s per tier over the last complete window
}

// NewMeter returns a meter of tiers tiers whose first window starts now.
func NewMeter(clk clock.Clock, tiers int, window time.Duration) (*Meter, error) {
	if clk == nil {
		return nil, fmt.Errorf("nitsum: meter: no clock")
	}
	if tiers < 1 {
		return nil, fmt.Errorf("nitsum: meter: want at least one tier, got %d", tiers)
	}
	if window <= 0 {
		return nil, fmt.Errorf("nitsum: meter: window must be positive, got %v", window)
	}
	return &Meter{clk: clk, window: window, start: clk.Now(), cur: make([]int64, tiers), last: make([]float64, tiers)}, nil
}

// Observe counts one arrival of tier s now.
func (m *Meter) Observe(s int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s < 0 || s >= len(m.cur) {
		return fmt.Errorf("nitsum: meter: tier %d out of range [0, %d)", s, len(m.cur))
	}
	m.roll(m.clk.Now())
	m.cur[s]++
	return nil
}

// Rates appends to dst each tier's arrival rate, req/s, over the last
// complete window: zeros before the first window ends and after a window
// with no arrivals.
func (m *Meter) Rates(dst []float64) []float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roll(m.clk.Now())
	return append(dst, m.last...)
}

// roll closes the windows that ended by now.
func (m *Meter) roll(now time.Time) {
	elapsed := now.Sub(m.start)
	if elapsed < m.window {
		return
	}
	k := elapsed / m.window
	for s, c := range m.cur {
		if k == 1 {
			m.last[s] = float64(c) / m.window.Seconds()
		} else {
			m.last[s] = 0 // the window before now had no arrivals
		}
		m.cur[s] = 0
	}
	m.start = m.start.Add(k * m.window)
}
