package pricer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricer"
)

// An until-done run's incomplete error speaks of contracts, counted in the
// database when it answers, else by the distributor, and still matches
// distributor.ErrIncomplete.
func TestIncomplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	cause := &distributor.IncompleteError{Quarantined: 3}
	err := pricer.Incomplete(ctx, db, "", cause)
	if !errors.Is(err, distributor.ErrIncomplete) || err.Error() != "work remains: 0 contracts are quarantined; see worker status, then worker retry CONTRACT" {
		t.Errorf("counted in the database: %v", err)
	}
	db.Close()
	if err := pricer.Incomplete(ctx, db, "", cause); err.Error() != "work remains: 3 contracts are quarantined; see worker status, then worker retry CONTRACT" {
		t.Errorf("counted by the distributor: %v", err)
	}
	if err := pricer.Incomplete(ctx, db, "", distributor.ErrIncomplete); err.Error() != "work remains: contracts are quarantined; see worker status, then worker retry CONTRACT" {
		t.Errorf("not counted: %v", err)
	}
}
