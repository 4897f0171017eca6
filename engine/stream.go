package engine

import (
	"context"
	"io"
	"sync"
)

// Stream delivers one request's events in order. The engine never blocks
// on a slow reader: events queue until read. After the final event (Finish
// set), Recv returns io.EOF.
type Stream struct {
	id     string
	mu     sync.Mutex
	queue  []Event
	done   bool // the final event was pushed
	notify chan struct{}
}

func newStream(id string) *Stream { return &Stream{id: id, notify: make(chan struct{}, 1)} }

// ID is the request's id (for Engine.Abort).
func (s *Stream) ID() string { return s.id }

func (s *Stream) push(ev Event) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, ev)
	s.done = ev.Finish != ""
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// pop removes and returns the first queued event; s.mu is held and the
// queue is not empty. An emptied queue keeps its array for the next push.
func (s *Stream) pop() Event {
	ev := s.queue[0]
	s.queue[0] = Event{}
	if len(s.queue) == 1 {
		s.queue = s.queue[:0]
	} else {
		s.queue = s.queue[1:]
	}
	return ev
}

// Recv returns the next event, waiting for it; io.EOF after the final
// event, or ctx's error.
func (s *Stream) Recv(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.pop()
			s.mu.Unlock()
			return ev, nil
		}
		if s.done {
			s.mu.Unlock()
			return Event{}, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// TryRecv returns the next event if one is queued, without waiting: ok is
// false when none is (after the final event has been read, always). A
// caller that drives the engine itself (Engine.Iterate, as the simulator
// does) reads the events of each stream Options.OnEvent named after
// every iteration.
func (s *Stream) TryRecv() (ev Event, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return Event{}, false
	}
	return s.pop(), true
}
