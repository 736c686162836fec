// Drives the http-cache-tests npm package (https://github.com/http-tests/cache-tests) for
// tests/cachesuite/harness.py. The package's own entry points do not fit a harness: its
// server listens on every interface and writes a pid file, and its CLI prints raw results
// without the tests' kinds, names or dependencies. This file uses the package's modules
// (request handlers, test runner, test definitions, result classification) and adds only
// the plumbing.
//
//   node suite.mjs serve PKG                 the suite's origin on 127.0.0.1 (prints "listening PORT")
//   node suite.mjs list PKG                  the test definitions as JSON on stdout
//   node suite.mjs run PKG BASE OUT CAP [ID...]
//                                            run the tests (all, or the IDs) against BASE,
//                                            write results to OUT; stop after CAP seconds;
//                                            with CACHESUITE_DUMP=1 and IDs, the client and
//                                            the origin print every request and response
//
// PKG is the package's directory (.../node_modules/http-cache-tests).

import fs from 'fs'
import http from 'http'
import path from 'path'
import { createRequire } from 'module'
import { pathToFileURL } from 'url'

const REQUEST_TIMEOUT_MS = 20000

// The third element of the suite's result types (lib/display.mjs), by name.
const OUTCOMES = {
  '✅': 'pass',
  '⛔️': 'fail',
  '⚠️': 'optional_fail',
  Y: 'yes',
  N: 'no',
  '🔹': 'setup_fail',
  '⁉️': 'harness_fail',
  '⚪️': 'dependency_fail',
  '↻': 'retry',
  '-': 'untested'
}

function load (pkg, rel) {
  return import(pathToFileURL(path.join(pkg, rel)).href)
}

async function testSuites (pkg) {
  // As the package's cli.mjs: the index plus the Surrogate-Control suite.
  const suites = (await load(pkg, 'tests/index.mjs')).default
  const surrogate = (await load(pkg, 'tests/surrogate-control.mjs')).default
  if (!suites.includes(surrogate)) suites.push(surrogate)
  return suites
}

function describe (suites) {
  // Copied before running: the runner writes into the request objects.
  const tests = []
  for (const suite of suites) {
    for (const test of suite.tests) {
      tests.push({
        suite: suite.id,
        suite_name: suite.name,
        id: test.id,
        name: test.name,
        kind: test.kind || 'required',
        required: test.kind === undefined || test.kind === 'required',
        browser_only: test.browser_only === true,
        browser_skip: test.browser_skip === true,
        depends_on: test.depends_on || [],
        requests: JSON.parse(JSON.stringify(test.requests))
      })
    }
  }
  return tests
}

async function serve (pkg) {
  const handleConfig = (await load(pkg, 'server/handle-config.mjs')).default
  const handleTest = (await load(pkg, 'server/handle-test.mjs')).default
  const handleState = (await load(pkg, 'server/handle-state.mjs')).default
  const handlers = { config: handleConfig, test: handleTest, state: handleState }
  const server = http.createServer((request, response) => {
    const segments = new URL(request.url, 'http://127.0.0.1/').pathname.split('/')
    segments.shift()
    const handler = handlers[segments.shift()]
    if (handler === undefined) {
      response.writeHead(404, { 'Content-Type': 'text/plain' })
      response.end(`no such path: ${request.url}\n`)
      return
    }
    handler(segments, request, response)
  })
  server.listen(0, '127.0.0.1', () => {
    console.log(`listening ${server.address().port}`)
  })
  // The harness holds our stdin; when it goes away, so do we.
  process.stdin.on('end', () => process.exit(0))
  process.stdin.resume()
}

function timedFetch (fetch) {
  return (url, init) => {
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS)
    timer.unref()
    return fetch(url, { ...init, signal: controller.signal })
  }
}

async function run (pkg, base, out, capSeconds, ids) {
  const suites = await testSuites(pkg)
  const described = describe(suites)
  const runner = await load(pkg, 'client/runner.mjs')
  const display = await load(pkg, 'lib/display.mjs')
  const requireFromPkg = createRequire(path.join(pkg, 'package.json'))
  const fetchModule = await import(pathToFileURL(requireFromPkg.resolve('node-fetch')).href)
  const fetch = fetchModule.default
  const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version

  let selected = suites
  if (ids.length > 0) {
    const wanted = new Set(ids)
    selected = suites
      .map(suite => ({ ...suite, tests: suite.tests.filter(test => wanted.has(test.id)) }))
      .filter(suite => suite.tests.length > 0)
    if (process.env.CACHESUITE_DUMP === '1') {
      // The suite's own debugging aid (its cli.mjs --id): the flag travels in the config
      // to the origin, which then logs what it receives and sends.
      selected.forEach(suite => suite.tests.forEach(test => { test.dump = true }))
    }
  }
  const started = Date.now()

  function finish (capped) {
    const results = runner.getResults()
    const tests = described.map(test => {
      const result = results[test.id]
      let outcome = 'untested'
      let outcomeIgnoringDependencies = 'untested'
      if (result !== undefined) {
        outcome = OUTCOMES[display.determineTestResult(suites, test.id, results, true)[2]]
        outcomeIgnoringDependencies =
          OUTCOMES[display.determineTestResult(suites, test.id, results, false)[2]]
      }
      return {
        ...test,
        result: result === undefined ? null : result,
        outcome,
        outcome_ignoring_dependencies: outcomeIgnoringDependencies
      }
    })
    const report = {
      package: 'http-cache-tests',
      version,
      base,
      capped,
      cap_seconds: capSeconds,
      elapsed_seconds: (Date.now() - started) / 1000,
      tests
    }
    fs.writeFileSync(out, JSON.stringify(report, null, 2))
    process.exit(0)
  }

  setTimeout(() => finish(true), capSeconds * 1000).unref()
  await runner.runTests(selected, timedFetch(fetch), false, base)
  finish(false)
}

async function main () {
  const [command, pkg, ...rest] = process.argv.slice(2)
  if (command === 'serve') {
    await serve(pkg)
  } else if (command === 'list') {
    console.log(JSON.stringify(describe(await testSuites(pkg)), null, 2))
  } else if (command === 'run') {
    const [base, out, cap, ...ids] = rest
    await run(pkg, base, out, Number(cap), ids)
  } else {
    console.error('usage: suite.mjs serve PKG | list PKG | run PKG BASE OUT CAP [ID...]')
    process.exit(2)
  }
}

main().catch(err => {
  console.error(err)
  process.exit(1)
})
