"""The demo origin's pure core: terrain, tide, marching squares, shoreline extraction."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from elastic_cache.demo_origin.shoreline import (
    AUTO_RESOLUTION_MAX,
    AUTO_RESOLUTION_MIN,
    M2,
    MAX_RESOLUTION,
    MIN_RESOLUTION,
    S2,
    TERRAIN_SEED,
    TidalConstituent,
    auto_resolution,
    contour,
    extract_shoreline,
    location_seed,
    shoreline_json,
    synthetic_terrain,
    tide_level,
    validate_location,
)
from elastic_cache.errors import InvalidRequest

# Small grids keep the suite fast; the automatic resolution costs 50–300 ms per call.
RES = 48
T0 = 1_700_000_000.0

# Computed once and pinned: if one changes, every location's terrain changes.
SEED_GOLDEN = {
    (0.0, 0.0): 11409568745387856869,
    (51.5, -0.1): 1457918322299933220,
    (-33.8688, 151.2093): 3687997254744253090,
    (90.0, 180.0): 16380390121617018183,
}


def signed_area(ring: np.ndarray) -> float:
    """Shoelace area with x = column, y = row: positive when counter-clockwise."""
    y, x = ring[:, 0], ring[:, 1]
    return 0.5 * float(np.sum(x[:-1] * y[1:] - x[1:] * y[:-1]))


def value_on_edge(z: np.ndarray, row: float, col: float) -> float:
    """Linear interpolation of z at a point that lies on a grid edge."""
    if row == int(row):
        i, j = int(row), min(int(col), z.shape[1] - 2)
        f = col - j
        return float(z[i, j] * (1 - f) + z[i, j + 1] * f)
    i, j = min(int(row), z.shape[0] - 2), int(col)
    f = row - i
    return float(z[i, j] * (1 - f) + z[i + 1, j] * f)


# --- location seed and resolution -------------------------------------------------------


def test_terrain_seed_is_pinned() -> None:
    assert TERRAIN_SEED == 0x5A0E11E5


@pytest.mark.parametrize(("location", "seed"), sorted(SEED_GOLDEN.items()))
def test_location_seed_golden(location: tuple[float, float], seed: int) -> None:
    assert location_seed(*location) == seed


def test_location_seed_rounds_to_four_decimals() -> None:
    assert location_seed(51.50001, -0.10004) == location_seed(51.5, -0.1)
    assert location_seed(51.5001, -0.1) != location_seed(51.5, -0.1)
    assert location_seed(-0.00001, -0.0) == location_seed(0.0, 0.0)
    assert location_seed(10.0, 180.0) == location_seed(10.0, -180.0)


def test_auto_resolution_stays_in_band() -> None:
    rng = np.random.default_rng(1)
    values = [
        auto_resolution(location_seed(float(a), float(b)))
        for a, b in zip(rng.uniform(-90, 90, 500), rng.uniform(-180, 180, 500), strict=True)
    ]
    assert min(values) >= AUTO_RESOLUTION_MIN
    assert max(values) <= AUTO_RESOLUTION_MAX
    assert len(set(values)) > 300  # it does vary with the location
    assert MIN_RESOLUTION <= AUTO_RESOLUTION_MIN <= AUTO_RESOLUTION_MAX <= MAX_RESOLUTION


# --- tide -------------------------------------------------------------------------------


@pytest.mark.parametrize("constituent", [M2, S2, TidalConstituent("X", 7.5, 0.3, 1.1)])
@pytest.mark.parametrize("t", [0.0, 12_345.6, T0, -T0])
def test_constituent_is_periodic(constituent: TidalConstituent, t: float) -> None:
    period_s = constituent.period_h * 3600.0
    for k in (1, 2, 17):
        assert constituent.level(t + k * period_s) == pytest.approx(constituent.level(t), abs=1e-6)
    assert constituent.level(t + period_s / 2) == pytest.approx(-constituent.level(t), abs=1e-6)


def test_tide_level_sums_m2_and_s2() -> None:
    assert tide_level(0.0) == pytest.approx(M2.amplitude_m + S2.amplitude_m)
    for t in (1.0, 3600.0 * 5, T0):
        assert tide_level(t) == pytest.approx(M2.level(t) + S2.level(t))
        assert abs(tide_level(t)) <= M2.amplitude_m + S2.amplitude_m
    assert tide_level(T0, ()) == 0.0


def test_m2_and_s2_beat_into_spring_and_neap_tides() -> None:
    # Phases realign after 1 / (1/12 - 1/12.4206) hours, about 14.77 days.
    beat_s = 3600.0 / (1 / S2.period_h - 1 / M2.period_h)
    assert beat_s / 86400 == pytest.approx(14.77, abs=0.01)
    hours = np.arange(0.0, 30.0) * 3600.0
    spring = max(abs(tide_level(t)) for t in hours)
    neap = max(abs(tide_level(beat_s / 2 + t)) for t in hours)
    assert spring == pytest.approx(1.46, abs=0.02)
    assert neap < 0.7  # 1.0 - 0.46 at the exact opposition


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lat", "lon", "t", "param"),
    [
        (90.0001, 0.0, 0.0, "lat"),
        (-91.0, 0.0, 0.0, "lat"),
        (math.nan, 0.0, 0.0, "lat"),
        (math.inf, 0.0, 0.0, "lat"),
        (0.0, 180.5, 0.0, "lon"),
        (0.0, -181.0, 0.0, "lon"),
        (0.0, math.nan, 0.0, "lon"),
        (0.0, 0.0, math.nan, "t"),
        (0.0, 0.0, math.inf, "t"),
        (0.0, 0.0, -math.inf, "t"),
    ],
)
def test_validate_location_rejects(lat: float, lon: float, t: float, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_location(lat, lon, t)
    assert info.value.details["param"] == param
    assert info.value.status == 400
    with pytest.raises(InvalidRequest):
        extract_shoreline(lat, lon, t, resolution=RES)


@pytest.mark.parametrize(("lat", "lon"), [(90.0, 180.0), (-90.0, -180.0), (0.0, 0.0)])
def test_validate_location_accepts_bounds(lat: float, lon: float) -> None:
    validate_location(lat, lon, -1e12)


@pytest.mark.parametrize("resolution", [MIN_RESOLUTION - 1, 0, -5, MAX_RESOLUTION + 1])
def test_resolution_out_of_range(resolution: int) -> None:
    with pytest.raises(InvalidRequest) as info:
        extract_shoreline(0.0, 0.0, 0.0, resolution=resolution)
    assert info.value.details["param"] == "resolution"


# --- marching squares ---------------------------------------------------------------------


def test_contour_of_a_single_peak_is_a_counter_clockwise_diamond() -> None:
    z = np.zeros((3, 3))
    z[1, 1] = 1.0
    (ring,) = contour(z, 0.5)
    assert ring.tolist() == [[1.0, 0.5], [0.5, 1.0], [1.0, 1.5], [1.5, 1.0], [1.0, 0.5]]
    assert signed_area(ring) > 0  # land on the left: counter-clockwise around an island


def test_contour_of_a_single_pit_is_clockwise() -> None:
    z = np.ones((3, 3))
    z[1, 1] = 0.0
    (ring,) = contour(z, 0.5)
    assert len(ring) == 5
    assert ring[0].tolist() == ring[-1].tolist()
    assert signed_area(ring) < 0  # a lake: land outside, still on the left


def test_contour_of_a_ramp_is_a_straight_open_line() -> None:
    # z grows eastward (with the column); land is east of col 1.25.
    z = np.tile(np.arange(5.0), (4, 1))
    (line,) = contour(z, 1.25)
    assert line[:, 1].tolist() == [1.25] * 4
    # Land (east) on the left means walking south: rows decrease.
    assert line[:, 0].tolist() == [3.0, 2.0, 1.0, 0.0]


def test_contour_is_empty_without_a_crossing() -> None:
    z = np.arange(12.0).reshape(3, 4)
    assert contour(z, -1.0) == []
    assert contour(z, 11.0) == []  # nothing strictly above the level


@pytest.mark.parametrize(("level", "rings"), [(0.4, 1), (0.6, 2)])
def test_saddle_is_resolved_by_the_centre(level: float, rings: int) -> None:
    # Two land corners touching diagonally; the centre (mean 0.5) joins or splits them.
    z = np.array([[1.0, 0.0], [0.0, 1.0]])
    z = np.pad(z, 1)  # a sea border so everything closes
    lines = contour(z, level)
    # Centre above the level: one island around both corners; below: two islands.
    assert len(lines) == rings
    assert all(line[0].tolist() == line[-1].tolist() for line in lines)
    assert all(signed_area(line) > 0 for line in lines)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_contour_points_lie_on_the_level_at_every_crossed_edge(seed: int) -> None:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(23, 31)).cumsum(axis=0).cumsum(axis=1)
    level = float(np.median(z)) + 1e-3  # not a grid value: no crossing on a vertex
    lines = contour(z, level)
    points = np.concatenate(lines)
    for row, col in points:
        assert value_on_edge(z, row, col) == pytest.approx(level, abs=1e-9)
    # Each crossed edge appears once, except the closing point of each ring.
    land = z > level
    crossed = np.count_nonzero(land[:, 1:] != land[:, :-1]) + np.count_nonzero(
        land[1:, :] != land[:-1, :]
    )
    closed = sum(line[0].tolist() == line[-1].tolist() and len(line) > 1 for line in lines)
    assert len(points) == crossed + closed
    assert len({(float(r), float(c)) for r, c in points}) == crossed
    # Open polylines start and end on the border.
    for line in lines:
        if line[0].tolist() != line[-1].tolist():
            for r, c in (line[0], line[-1]):
                assert r in (0, z.shape[0] - 1) or c in (0, z.shape[1] - 1)


def edge_ends(row: float, col: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two grid points of the edge a contour point lies on."""
    if row == int(row):
        return (int(row), int(col)), (int(row), int(col) + 1)
    return (int(row), int(col)), (int(row) + 1, int(col))


@pytest.mark.parametrize("seed", [4, 5, 6, 7])
def test_contour_segments_keep_land_on_the_left(seed: int) -> None:
    # Within its cell a segment separates the land corners from the sea corners, so both
    # ends of the edges it joins must lie on the correct side of it: land on the left
    # (x = column, y = row).
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(40, 40)).cumsum(axis=0).cumsum(axis=1)
    level = float(np.median(z)) + 1e-3
    segments = 0
    for line in contour(z, level):
        for (r0, c0), (r1, c1) in itertools.pairwise(line):
            segments += 1
            for point in ((r0, c0), (r1, c1)):
                for vr, vc in edge_ends(*point):
                    cross = (c1 - c0) * (vr - r0) - (r1 - r0) * (vc - c0)
                    assert (cross > 0) == bool(z[vr, vc] > level)
    assert segments > 50


# --- terrain and extraction ---------------------------------------------------------------


def test_terrain_has_land_and_sea_and_is_deterministic() -> None:
    for lat in (0.0, 45.0, -60.0):
        seed = location_seed(lat, 10.0)
        z = synthetic_terrain(seed, 64)
        assert z.shape == (64, 64)
        assert z.flags.c_contiguous
        assert np.isfinite(z).all()
        assert 0.25 < np.mean(z > 0) < 0.75
        assert np.array_equal(z, synthetic_terrain(seed, 64))


def test_extract_shoreline_is_byte_identical_across_calls() -> None:
    a = shoreline_json(extract_shoreline(51.5, -0.1, T0, resolution=RES))
    b = shoreline_json(extract_shoreline(51.5, -0.1, T0, resolution=RES))
    assert a == b
    assert a != shoreline_json(extract_shoreline(51.5, -0.1, T0 + 3600, resolution=RES))
    assert a != shoreline_json(extract_shoreline(51.6, -0.1, T0, resolution=RES))


def test_int_and_float_arguments_give_the_same_bytes() -> None:
    as_int = shoreline_json(extract_shoreline(51, 0, 1_700_000_000, resolution=RES))
    as_float = shoreline_json(extract_shoreline(51.0, 0.0, 1.7e9, resolution=RES))
    assert as_int == as_float


def test_extract_shoreline_is_byte_identical_across_processes() -> None:
    code = (
        "import sys; from elastic_cache.demo_origin import extract_shoreline, shoreline_json;"
        f"sys.stdout.buffer.write(shoreline_json(extract_shoreline(51.5, -0.1, {T0!r},"
        f" resolution={RES})))"
    )
    here = shoreline_json(extract_shoreline(51.5, -0.1, T0, resolution=RES))
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, check=True, timeout=60
        )
        assert out.stdout == here


def test_shoreline_metadata() -> None:
    s = extract_shoreline(-33.8688, 151.2093, T0, resolution=RES)
    assert (s.lat, s.lon, s.t, s.resolution) == (-33.8688, 151.2093, T0, RES)
    assert s.seed == location_seed(-33.8688, 151.2093)
    south, west, north, east = s.bbox
    assert south < s.lat < north
    assert west < s.lon < east
    assert 0.0 < s.land_fraction < 1.0
    assert abs(s.tide_level_m) <= M2.amplitude_m + S2.amplitude_m
    assert s.polylines
    for line in s.polylines:
        assert len(line) >= 2
        for lat, lon in line:
            assert south <= lat <= north
            assert west <= lon <= east
    body = json.loads(shoreline_json(s))
    assert body["grid"] == {"rows": RES, "cols": RES}
    assert body["seed"] == f"{s.seed:016x}"
    assert body["polylines"][0][0] == list(s.polylines[0][0])


def test_shoreline_points_lie_on_the_terrain_at_the_tide_level() -> None:
    s = extract_shoreline(12.0, 34.0, T0, resolution=RES)
    z = synthetic_terrain(s.seed, RES)
    south, west, north, east = s.bbox
    slope = np.abs(np.diff(z, axis=0)).max() + np.abs(np.diff(z, axis=1)).max()
    for line in s.polylines:
        for lat, lon in line:
            row = (lat - south) / (north - south) * (RES - 1)
            col = (lon - west) / (east - west) * (RES - 1)
            # Coordinates are rounded to 1e-6 degrees: snap to the edge they lie on.
            if abs(row - round(row)) < abs(col - round(col)):
                row = round(row)
            else:
                col = round(col)
            assert value_on_edge(z, row, col) == pytest.approx(s.tide_level_m, abs=slope * 1e-3)


def test_higher_tide_means_less_land() -> None:
    times = [T0 + h * 3600.0 for h in range(13)]
    shorelines = [extract_shoreline(5.0, 5.0, t, resolution=RES) for t in times]
    by_level = sorted(shorelines, key=lambda s: s.tide_level_m)
    fractions = [s.land_fraction for s in by_level]
    assert fractions == sorted(fractions, reverse=True)
    assert fractions[0] > fractions[-1]


@pytest.mark.parametrize(("lat", "lon"), [(90.0, 180.0), (-90.0, 0.0), (0.0, -180.0)])
def test_poles_and_antimeridian(lat: float, lon: float) -> None:
    s = extract_shoreline(lat, lon, T0, resolution=RES)
    south, west, north, east = s.bbox
    assert -90.0 <= south < north <= 90.0
    assert -180.0 <= west < 180.0
    assert -180.0 <= east < 180.0
    for line in s.polylines:
        for p_lat, p_lon in line:
            assert -90.0 <= p_lat <= 90.0
            assert -180.0 <= p_lon < 180.0


def test_json_is_compact_sorted_and_finite() -> None:
    body = shoreline_json(extract_shoreline(1.0, 2.0, 3.0, resolution=RES))
    assert b" " not in body
    data = json.loads(body)
    assert list(data) == sorted(data)
    assert json.dumps(data, sort_keys=True, separators=(",", ":")).encode() == body


def test_the_module_takes_no_abbreviated_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m elastic_cache.demo_origin --del 1`` ran with ``--delay 1``; every
    ``ecache`` command refuses a shortened flag (review)."""
    from elastic_cache.demo_origin.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["--del", "1"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --del 1" in capsys.readouterr().err
