package keepalive

import "context"

// Beat lets the package's external tests drive one renewal round without
// the loop's timer; it is compiled into test binaries only.
func (s *Service) Beat(ctx context.Context) { s.beat(ctx) }
