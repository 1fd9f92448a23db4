// Package browser holds the operator console's tests in headless Chromium:
// a worker binary built once for the package, real worker processes and
// "worker ui" against a real PostgreSQL, and the pages driven through the
// Chrome DevTools Protocol. Without Chromium the tests are skipped unless
// BATON_REQUIRE_BROWSER=1, which makes that a failure (CI sets it).
// Screenshots land in $BATON_SCREENSHOT_DIR, by default
// baton-console-screenshots in the temporary directory.
package browser
