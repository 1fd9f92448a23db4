package pricer

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/noun"
)

// Incomplete words err, the distributor's error of an until-done run that
// left partitions quarantined (distributor.ErrIncomplete), in contracts:
// the distributor counts task rows, and a contract split into segments may
// have several quarantined, so it counts the contracts in schemaName of db
// if it can and otherwise says the distributor's count. errors.Is still
// finds err.
func Incomplete(ctx context.Context, db *dbconn.DB, schemaName string, err error) error {
	const what = "; see worker status, then worker retry CONTRACT"
	n, cerr := Partitions(db, schemaName).QuarantinedPartitions(ctx)
	if cerr != nil {
		ie, ok := errors.AsType[*distributor.IncompleteError](err)
		if !ok {
			return &wordedError{"work remains: contracts are quarantined" + what, err}
		}
		n = ie.Quarantined
	}
	return &wordedError{fmt.Sprintf("work remains: %s quarantined%s", noun.Count(n, "contract is", "contracts are"), what), err}
}
