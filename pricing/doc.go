// Package pricing prices consumption records under tiered volume
// discounts, exactly, in integer minor units (cents, pence, ...). It is
// pure: no database, no clock, no floating point anywhere.
//
// # Schedules
//
// A contract's discount schedule is a list of tiers, each a threshold in
// minor units and a discount rate in basis points (1 bp = 0.01%, so
// 10000 bp is a 100% discount). Tiers work like income-tax brackets: the
// part of the contract's cumulative gross that falls between one tier's
// threshold and the next tier's threshold is discounted at that tier's
// rate, and the highest tier's rate applies to everything above its
// threshold. Crossing a threshold never changes the price of the gross
// already below it.
//
// A schedule has 1 to [MaxTiers] tiers with distinct thresholds >= 0 and
// rates from 0 to [MaxDiscountBP]; the tiers may be given in any order.
// When no tier starts at 0, gross below the lowest threshold is not
// discounted, as if a tier (0, 0 bp) had been given. [NewSchedule]
// checks all of this and reports the first offending tier by its position
// in the caller's slice, wrapping [ErrInvalidTiers].
//
// # Cumulative net and rounding
//
// For a cumulative gross G the discount D(G) is the sum, over the tiers,
// of the tier's rate times the part of G inside the tier, and
//
//	N(G) = 10000*G - D(G)
//
// is ten thousand times the exact net of G: the exact net is a multiple of
// 1/10000 of a minor unit. [Schedule.ExactNet] shows it with four decimal
// places. The payable cumulative net R(G) ([Schedule.Rounded]) is the exact
// net rounded to a whole minor unit, half to even: a value exactly halfway
// between two integers goes to the even one (0.5 to 0, 1.5 to 2, 2.5 to
// 2), so halfway cases do not drift upwards on average.
//
// # Records
//
// A record's amount a is 1 to [MaxAmount] minor units. If the contract's
// records before it sum to G0 and G1 = G0 + a, the record's line is
//
//	Gross    = a
//	Net      = R(G1) - R(G0)
//	Discount = Gross - Net
//
// Because each net is a difference of cumulative values, the nets of a
// contract's records always add up to exactly R(total gross): rounding
// never accumulates, and the result does not depend on how the records
// are split into batches, only on their order.
//
// Net is never negative and never more than the gross plus one. A
// Discount is normally >= 0; it can be -1 when a schedule's rate falls at a
// higher tier and the rounding of R(G0) and R(G1) goes opposite ways. For
// example, with tiers (0, 5000 bp) and (1, 0 bp) two records of 1 give
// R(1) = round(0.5) = 0 and R(2) = round(1.5) = 2, so the second record has
// Net 2 and Discount -1. With rates that never fall as gross grows, every
// Discount is >= 0.
//
// A [Cursor] prices a contract's records in order. [Schedule.Resume]
// starts one at a checkpoint, the cumulative gross of the records already
// priced (0 for a new contract), so work can stop after any record and
// continue later, in another process, with the same results. [Cursor.Next]
// costs the same whatever the number of tiers: the cursor remembers its
// tier and its position and moves forward only across the thresholds a
// record actually crosses, and it does not allocate. [Schedule.Price]
// prices a single record at a given cumulative gross.
//
// # Exactness
//
// Cumulative gross may be anything up to 2^63-1 minor units; a record that
// would take it further is refused with [ErrOverflow] and does not move the
// cursor. Then 10000*G no longer fits in 64 bits, so N is kept in 128
// bits (math/bits): every rate is between 0 and 10000 bp, so
//
//	0 <= N(G) <= 10000*G < 10000 * 2^63 < 2^14 * 2^63 = 2^77,
//
// which leaves 51 bits to spare, and the high 64-bit word of N is below
// 5000, so one 128-by-64-bit division by 10000 yields the quotient and
// remainder without overflow. R(G) <= G, so the rounded result is an
// int64 again. Within a Cursor, one record changes N by at most
// 10000 * 10^12 = 10^16 < 2^54, so Next carries N as a quotient and
// remainder of 10000 and needs only 64-bit arithmetic per record.
//
// The package's tests cross-check this arithmetic against a deliberately
// plain math/big implementation of the definitions above, on golden
// vectors, random schedules and records, and under fuzzing.
package pricing
