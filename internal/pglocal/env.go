package pglocal

import "slices"

// SetEnv sets variables ("NAME=value") added to the environment of the
// server's next starts (Restart), for example to run it under libfaketime
// (LD_PRELOAD and FAKETIME) so that its clock differs from the host's, as a
// new primary's may after a failover. Nil clears them.
func (s *Server) SetEnv(env ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.env = slices.Clone(env)
}
