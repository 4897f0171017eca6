package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

// progress reports a run's progress on a writer from its own goroutine: a
// bar redrawn in place with \r, or a log line every interval. A nil
// *progress reports nothing.
type progress struct {
	w        io.Writer
	bar      bool
	total    int
	start    time.Time
	clock    clock.Clock
	interval time.Duration

	running, done, failed atomic.Int64
	quit                  chan struct{}
	wg                    sync.WaitGroup
}

func startProgress(o *Options, total int, start time.Time) *progress {
	if o.Progress == nil {
		return nil
	}
	p := &progress{w: o.Progress, bar: o.ProgressBar, total: total, start: start, clock: o.Clock, interval: o.ProgressInterval, quit: make(chan struct{})}
	if p.interval <= 0 {
		p.interval = 10 * time.Second
		if p.bar {
			p.interval = 200 * time.Millisecond
		}
	}
	p.wg.Go(p.loop)
	return p
}

func (p *progress) loop() {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			p.draw(true)
			return
		case <-t.C:
			p.draw(false)
		}
	}
}

func (p *progress) draw(final bool) {
	done, failed, running := p.done.Load(), p.failed.Load(), p.running.Load()
	elapsed := p.clock.Now().Sub(p.start).Seconds()
	if !p.bar {
		fmt.Fprintf(p.w, "bench: %d/%d requests done, %d failed, %d in flight, %.1f s\n", done, p.total, failed, running, elapsed)
		return
	}
	const width = 30
	filled := 0
	if p.total > 0 {
		filled = int(done) * width / p.total
	}
	line := fmt.Sprintf("\r%3d%% [%s%s] %d/%d  %d in flight, %d failed, %.1f s ",
		int(done)*100/max(p.total, 1), strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, p.total, running, failed, elapsed)
	if final {
		line += "\n"
	}
	io.WriteString(p.w, line)
}

func (p *progress) sent() {
	if p != nil {
		p.running.Add(1)
	}
}

func (p *progress) abandoned() {
	if p != nil {
		p.running.Add(-1)
	}
}

func (p *progress) ended(ok bool) {
	if p == nil {
		return
	}
	p.running.Add(-1)
	p.done.Add(1)
	if !ok {
		p.failed.Add(1)
	}
}

// stop draws the last state and waits for the reporting goroutine.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	p.wg.Wait()
}
