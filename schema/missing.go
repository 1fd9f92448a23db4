package schema

import "fmt"

// MissingError is Check's error when the schema lacks migrations because
// it does not exist at all: a mistyped schema name, or a database never
// migrated. Unlike a schema that lacks a migration (one may be running
// beside this start), waiting does not cure it. errors.Is(err,
// ErrOutdated) holds for it, as for any schema that lacks migrations.
type MissingError struct {
	// Schema is the name of the schema that does not exist.
	Schema string
}

func (e *MissingError) Error() string {
	if e.Schema == Default {
		return fmt.Sprintf("schema %s does not exist: run worker migrate", e.Schema)
	}
	return fmt.Sprintf("schema %s does not exist: run worker migrate --schema %s (or check --schema and $BATON_SCHEMA)", e.Schema, e.Schema)
}

// Is makes a MissingError an ErrOutdated for errors.Is.
func (e *MissingError) Is(target error) bool { return target == ErrOutdated }
