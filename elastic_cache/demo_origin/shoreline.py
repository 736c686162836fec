"""Synthetic shoreline extraction: the pure, CPU-bound core of the demo origin.

The paper's workload is a geodetic service that extracts the shoreline around a location
at a given time: the line where the water level (mean sea level plus the tide at that
moment) meets the terrain. We have no elevation data, so the terrain is synthetic but
deterministic: a square grid around the location whose random draws are seeded from a
MurmurHash3 of the location rounded to `LOCATION_DECIMALS` decimals (never Python's
``hash()``, which is salted per process). The tide is a sum of the two main
semi-diurnal constituents (M2, 12.42 h; S2, 12 h) with phases seeded the same way. The
shoreline is the contour of the grid at the tide level, found by marching squares.

Nothing here imports aiohttp or asyncio. Same inputs give byte-identical JSON on one
machine and numpy build; see ``docs/demo-origin.md`` for the cost profile.

Conventions:

* ``t`` is Unix time in seconds (any finite float).
* Grid rows run south to north, columns west to east. Contour points are ``(lat, lon)``
  pairs (not GeoJSON's ``[lon, lat]`` order), rounded to 6 decimals (about 10 cm).
* Each polyline has land on its left. A closed ring (an island or a lake) repeats its
  first point at its end; an open polyline starts and ends on the border of the grid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import mmh3
import numpy as np
import numpy.typing as npt

from elastic_cache.errors import InvalidRequest

__all__ = [
    "AUTO_RESOLUTION_MAX",
    "AUTO_RESOLUTION_MIN",
    "LOCATION_DECIMALS",
    "M2",
    "MAX_RESOLUTION",
    "MIN_RESOLUTION",
    "S2",
    "TERRAIN_SEED",
    "WINDOW_HALF_DEG",
    "Shoreline",
    "TidalConstituent",
    "auto_resolution",
    "contour",
    "extract_shoreline",
    "location_seed",
    "shoreline_json",
    "synthetic_terrain",
    "tide_level",
    "validate_location",
]

FloatGrid = npt.NDArray[np.float64]

#: Seed of the location hash. Changing it changes every shoreline: never do.
TERRAIN_SEED: Final = 0x5A0E_11E5

#: Locations are rounded to this many decimals (about 11 m) before hashing, so two
#: requests that round alike see the same terrain.
LOCATION_DECIMALS: Final = 4

#: Half the side of the grid window in degrees of latitude (about 5.6 km). The side in
#: degrees of longitude is stretched by 1/cos(lat) so the window is square on the ground.
WINDOW_HALF_DEG: Final = 0.05

#: Bounds of an explicit ``resolution`` (grid points per side).
MIN_RESOLUTION: Final = 3
MAX_RESOLUTION: Final = 4096

#: Bounds of the resolution derived from the location when none is given; chosen so one
#: request costs roughly 50–300 ms of CPU on the reference machine (docs/demo-origin.md).
AUTO_RESOLUTION_MIN: Final = 1150
AUTO_RESOLUTION_MAX: Final = 2450

_U64: Final = (1 << 64) - 1
_SECONDS_PER_HOUR: Final = 3600.0
_OUTPUT_DECIMALS: Final = 6

# Terrain recipe, in metres. A tilted plane guarantees land on one side and sea on the
# other; octaves of value noise and a few Gaussian hills and basins make the coast ragged
# and add islands and lakes.
_SLOPE_M: Final = 30.0
_OCTAVES: Final = 8
_BASE_LATTICE: Final = 3
_NOISE_M: Final = 10.0
_PERSISTENCE: Final = 0.6
_BUMPS: Final = 8
_BUMP_M: Final = 8.0
_STRIP: Final = 32


@dataclass(frozen=True, slots=True)
class TidalConstituent:
    """One harmonic term of the tide: ``amplitude * cos(2π t / period + phase)``.

    Attributes:
        name: the Darwin symbol, e.g. ``"M2"``.
        period_h: the period in hours.
        amplitude_m: the amplitude in metres.
        phase_rad: the phase at ``t = 0`` (1970-01-01T00:00Z) in radians.
    """

    name: str
    period_h: float
    amplitude_m: float
    phase_rad: float = 0.0

    def level(self, t: float) -> float:
        """The contribution of this constituent at Unix time ``t`` (seconds), in metres."""
        # Reduce to a fraction of a period first (fmod is exact), so cos() sees an angle
        # below 2π instead of the ~2e5 rad of a present-day t.
        cycles = math.fmod(t / (self.period_h * _SECONDS_PER_HOUR), 1.0)
        return self.amplitude_m * math.cos(2.0 * math.pi * cycles + self.phase_rad)


#: Principal lunar semi-diurnal constituent.
M2: Final = TidalConstituent("M2", 12.4206012, 1.0)
#: Principal solar semi-diurnal constituent; beats with M2 into the 14.77-day
#: spring-neap cycle.
S2: Final = TidalConstituent("S2", 12.0, 0.46)


def tide_level(t: float, constituents: Sequence[TidalConstituent] = (M2, S2)) -> float:
    """The water level above mean sea level at Unix time ``t``.

    Args:
        t: Unix time in seconds; must be finite.
        constituents: the harmonic terms to add up.

    Returns:
        The sum of the constituents' levels, in metres.
    """
    return math.fsum(c.level(t) for c in constituents)


def validate_location(lat: float, lon: float, t: float) -> None:
    """Check a request's coordinates.

    Args:
        lat: latitude in degrees.
        lon: longitude in degrees.
        t: Unix time in seconds.

    Raises:
        InvalidRequest: ``lat`` is outside [-90, 90], ``lon`` outside [-180, 180], or any
            of the three is not finite. ``details["param"]`` names the culprit.
    """
    for name, value, bound in (("lat", lat, 90.0), ("lon", lon, 180.0)):
        if not math.isfinite(value) or not -bound <= value <= bound:
            raise InvalidRequest(f"{name} must be in [-{bound:g}, {bound:g}]", param=name)
    if not math.isfinite(t):
        raise InvalidRequest("t must be a finite Unix time in seconds", param="t")


def location_seed(lat: float, lon: float) -> int:
    """The unsigned 64-bit seed of the terrain around a location.

    The location is rounded to `LOCATION_DECIMALS` decimals and written as two integers
    (so -0.0 and 0.0, and -180 and 180, hash alike) before MurmurHash3 with `TERRAIN_SEED`.
    Golden values in ``tests/unit/demo_origin/test_demo_origin.py`` pin the outputs.

    Args:
        lat: latitude in degrees.
        lon: longitude in degrees.

    Returns:
        The first 64-bit half of MurmurHash3 x64-128 of ``"{lat_e4}:{lon_e4}"``, unsigned.
    """
    scale = 10**LOCATION_DECIMALS
    qlat = round(lat * scale)
    qlon = round(lon * scale)
    if qlon == 180 * scale:
        qlon = -qlon
    return mmh3.hash64(f"{qlat}:{qlon}", TERRAIN_SEED)[0] & _U64


def auto_resolution(seed: int) -> int:
    """The grid resolution used for a location when the request names none.

    It varies with the location (through its seed) so that the cost of a request does
    too, uniformly between `AUTO_RESOLUTION_MIN` and `AUTO_RESOLUTION_MAX`.

    Args:
        seed: the location seed (`location_seed`).

    Returns:
        Grid points per side.
    """
    return AUTO_RESOLUTION_MIN + (seed >> 32) % (AUTO_RESOLUTION_MAX - AUTO_RESOLUTION_MIN + 1)


class _Uniform:
    """Uniform draws in [0, 1) from PCG64's raw output.

    We use the bit generator's raw stream, which numpy promises to keep stable (NEP 19),
    rather than `Generator` methods, whose algorithms may change between releases.
    """

    def __init__(self, seed: int) -> None:
        self._bits = np.random.PCG64(seed)

    def draw(self, n: int, low: float = 0.0, high: float = 1.0) -> FloatGrid:
        unit = (self._bits.random_raw(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return low + (high - low) * unit


def _fade(f: FloatGrid) -> FloatGrid:
    """Perlin's quintic fade 6f^5 - 15f^4 + 10f^3: smooth value noise with no creases."""
    return f * f * f * (f * (f * 6.0 - 15.0) + 10.0)


def _interpolation(cells: int, n: int) -> tuple[npt.NDArray[np.intp], FloatGrid]:
    """Left lattice index and fade weight of each of n grid points over ``cells`` cells."""
    u = np.linspace(0.0, float(cells), n)
    i0 = np.minimum(u.astype(np.intp), cells - 1)
    return i0, _fade(u - i0)


def _gaussian(axis: FloatGrid, centre: float, sigma: float) -> FloatGrid:
    """A Gaussian profile, flushed to zero below 1e-100.

    Far tails (down to 1e-241 here) multiplied by each other underflow into subnormal
    floats, which x86 CPUs handle about a hundred times slower than normal ones: before
    the flush, one location in four cost two to three times more than its grid size says.
    """
    g = np.exp(-0.5 * ((axis - centre) / sigma) ** 2)
    g[g < 1e-100] = 0.0
    return g


def synthetic_terrain(seed: int, n: int) -> FloatGrid:
    """A deterministic n×n elevation grid in metres, with sea below 0 and land above.

    The terrain is a tilted plane plus `_OCTAVES` octaves of value noise (random lattice
    values, quintic interpolation) plus `_BUMPS` Gaussian hills and basins, shifted so
    that a seeded fraction between 30 % and 70 % of the grid (estimated on every 4th row
    and column) lies below mean sea level.
    Row 0 is the southern edge, column 0 the western.

    Every term is separable, so each is first reduced to per-row and per-column factors
    and the grid is then filled in strips of `_STRIP` rows that stay in the CPU cache;
    filling whole n×n temporaries instead made the cost per point vary threefold with n.

    Runtime complexity: O(n^2) time, O(n^2) memory for the result.

    Args:
        seed: the location seed (`location_seed`).
        n: points per side, at least 2.

    Returns:
        A C-contiguous float64 array of shape (n, n).
    """
    rand = _Uniform(seed)
    axis = np.linspace(0.0, 1.0, n)
    (angle,) = rand.draw(1, 0.0, 2.0 * math.pi)
    slope_rows = (axis - 0.5) * (_SLOPE_M * math.sin(angle))
    slope_cols = (axis - 0.5) * (_SLOPE_M * math.cos(angle))
    # Per octave: the lattice interpolated along columns ((L+1) × n, scaled by the
    # octave's amplitude), and each row's lattice row and weight.
    octaves: list[tuple[FloatGrid, npt.NDArray[np.intp], FloatGrid]] = []
    for octave in range(_OCTAVES):
        cells = _BASE_LATTICE << octave
        lattice = rand.draw((cells + 1) ** 2, -1.0, 1.0).reshape(cells + 1, cells + 1)
        i0, w = _interpolation(cells, n)
        along = lattice[:, i0] * (1.0 - w) + lattice[:, i0 + 1] * w
        # Fancy indexing on axis 1 returns Fortran order; row gathers need C order.
        along = np.ascontiguousarray(along * (_NOISE_M * _PERSISTENCE**octave))
        octaves.append((along, i0, w))
    bumps: list[tuple[FloatGrid, FloatGrid]] = []
    for cy, cx, width, height in rand.draw(4 * _BUMPS).reshape(_BUMPS, 4):
        sigma = 0.03 + 0.09 * width
        gy = _gaussian(axis, cy, sigma) * (_BUMP_M * (2.0 * height - 1.0))
        bumps.append((gy, _gaussian(axis, cx, sigma)))
    (sea_fraction,) = rand.draw(1, 0.3, 0.7)

    z = np.empty((n, n))
    low = np.empty((_STRIP, n))
    high = np.empty((_STRIP, n))
    for r0 in range(0, n, _STRIP):
        r1 = min(r0 + _STRIP, n)
        block, lo, hi = z[r0:r1], low[: r1 - r0], high[: r1 - r0]
        np.add(slope_rows[r0:r1, None], slope_cols, out=block)
        for along, i0, w in octaves:
            np.take(along, i0[r0:r1], axis=0, out=lo, mode="clip")
            np.take(along, i0[r0:r1] + 1, axis=0, out=hi, mode="clip")
            hi -= lo
            hi *= w[r0:r1, None]
            block += lo
            block += hi
        for gy, gx in bumps:
            np.multiply(gy[r0:r1, None], gx, out=lo)
            block += lo
    # The quantile of every 4th row and column: as good a sea level, 16 times cheaper.
    z -= np.quantile(z[::4, ::4], sea_fraction)
    return z


def _segment_table() -> npt.NDArray[np.intp]:
    """Marching-squares lookup: ``table[case, centre_is_land, k] = (start_side, end_side)``.

    Corners of cell (i, j) are numbered 0 = (i, j), 1 = (i, j+1), 2 = (i+1, j+1),
    3 = (i+1, j); side s joins corner s to corner s+1 (0 = south, 1 = east, 2 = north,
    3 = west); ``case`` has bit s set when corner s is land. A segment starts on a side
    walked land → sea and ends on one walked sea → land, which puts land on its left and
    makes each crossed edge the start of one segment and the end of at most one other, so
    segments chain without search. Unused slots hold -1.
    """
    table = np.full((16, 2, 2, 2), -1, dtype=np.intp)
    for case in range(16):
        land = [bool(case >> corner & 1) for corner in range(4)]
        starts = [s for s in range(4) if land[s] and not land[(s + 1) % 4]]
        ends = [s for s in range(4) if not land[s] and land[(s + 1) % 4]]
        for centre in (0, 1):
            if len(starts) == 1:
                pairs = [(starts[0], ends[0])]
            elif centre:  # a saddle with land in the middle: cut off each sea corner
                pairs = [(s, (s + 1) % 4) for s in starts]
            else:  # a saddle with sea in the middle: cut off each land corner
                pairs = [(s, (s - 1) % 4) for s in starts]
            for k, pair in enumerate(pairs):
                table[case, centre, k] = pair
    return table


_SEGMENTS: Final = _segment_table()


def contour(z: FloatGrid, level: float) -> list[FloatGrid]:
    """The contour of a grid at a level, by marching squares.

    A point is land when ``z > level``. Crossings are placed on grid edges by linear
    interpolation; saddle cells are resolved by the mean of their four corners.

    Runtime complexity: O(rows × cols) vectorised, plus O(points) in Python to chain the
    segments into polylines.

    Args:
        z: a 2-D grid of finite values, at least 2×2.
        level: the contour level.

    Returns:
        Polylines as float arrays of shape (k, 2) holding ``(row, col)`` grid coordinates,
        land on the left when rows point up and columns right. Open polylines run from
        border to border; closed ones repeat their first point at the end. Ordered by
        the id of their first edge (horizontal edges row-major, then vertical ones), so
        the result is deterministic.
    """
    ny, nx = z.shape
    land = z > level
    # Crossed edges. Horizontal edge (i, j)–(i, j+1) has id i*(nx-1) + j; vertical edge
    # (i, j)–(i+1, j) has id n_horizontal + i*nx + j.
    n_horizontal = ny * (nx - 1)
    h_ids = np.flatnonzero(land[:, :-1] != land[:, 1:])
    v_ids = np.flatnonzero(land[:-1, :] != land[1:, :])
    if h_ids.size + v_ids.size == 0:
        return []
    hi, hj = np.divmod(h_ids, nx - 1)
    vi, vj = np.divmod(v_ids, nx)
    flat = z.ravel()
    h_z0 = flat[h_ids + hi]
    v_z0 = flat[v_ids]
    h_frac = (level - h_z0) / (flat[h_ids + hi + 1] - h_z0)
    v_frac = (level - v_z0) / (flat[v_ids + nx] - v_z0)
    edge_ids = np.concatenate([h_ids, v_ids + n_horizontal])  # sorted: h ids < offset
    rows = np.concatenate([hi.astype(np.float64), vi + v_frac])
    cols = np.concatenate([hj + h_frac, vj.astype(np.float64)])

    # Active cells and their segments.
    case = (
        land[:-1, :-1].astype(np.uint8)
        | land[:-1, 1:].astype(np.uint8) << 1
        | land[1:, 1:].astype(np.uint8) << 2
        | land[1:, :-1].astype(np.uint8) << 3
    ).ravel()
    cells = np.flatnonzero((case != 0) & (case != 15))
    cell_case = case[cells]
    ci, cj = np.divmod(cells, nx - 1)
    saddle = np.flatnonzero((cell_case == 5) | (cell_case == 10))
    centre = np.zeros(cells.size, dtype=np.intp)
    si, sj = ci[saddle], cj[saddle]
    centre[saddle] = (z[si, sj] + z[si, sj + 1] + z[si + 1, sj + 1] + z[si + 1, sj]) > 4 * level
    # Edge id of each side of each active cell: south, east, north, west.
    base_h = ci * (nx - 1) + cj
    base_v = n_horizontal + ci * nx + cj
    side_edge = np.stack([base_h, base_v + 1, base_h + (nx - 1), base_v])
    seg = _SEGMENTS[cell_case, centre]  # (cells, 2, 2)
    col = np.arange(cells.size)
    starts = side_edge[seg[:, 0, 0], col]
    ends = side_edge[seg[:, 0, 1], col]
    starts = np.concatenate([starts, side_edge[seg[saddle, 1, 0], saddle]])
    ends = np.concatenate([ends, side_edge[seg[saddle, 1, 1], saddle]])

    # Chain: compact ids, a successor array, then walk. Open chains begin at a start that
    # is nobody's end; whatever is left unvisited afterwards is a set of closed rings.
    start_idx = np.searchsorted(edge_ids, starts)
    end_idx = np.searchsorted(edge_ids, ends)
    order = np.argsort(start_idx, kind="stable")
    start_idx, end_idx = start_idx[order], end_idx[order]
    successor = np.full(edge_ids.size, -1, dtype=np.intp)
    successor[start_idx] = end_idx
    is_end = np.zeros(edge_ids.size, dtype=bool)
    is_end[end_idx] = True
    nxt: list[int] = successor.tolist()
    visited = bytearray(edge_ids.size)
    chains: list[tuple[int, list[int]]] = []
    heads = start_idx[~is_end[start_idx]].tolist()
    for first in (*heads, *start_idx.tolist()):
        if visited[first]:
            continue
        chain = [first]
        visited[first] = 1
        e = nxt[first]
        while e != -1 and not visited[e]:
            chain.append(e)
            visited[e] = 1
            e = nxt[e]
        if e == first:
            chain.append(first)
        chains.append((first, chain))
    chains.sort(key=lambda item: item[0])
    points = np.column_stack([rows, cols])
    return [points[chain] for _, chain in chains]


@dataclass(frozen=True, slots=True, kw_only=True)
class Shoreline:
    """The shoreline around a location at a moment.

    Attributes:
        lat: the requested latitude.
        lon: the requested longitude.
        t: the requested Unix time in seconds.
        tide_level_m: the water level above mean sea level at ``t``, in metres.
        resolution: grid points per side.
        bbox: the grid window as ``(south, west, north, east)`` in degrees; west may be
            greater than east when the window crosses the antimeridian.
        land_fraction: the share of grid points above the water level.
        seed: the terrain seed of the location.
        polylines: the contour as polylines of ``(lat, lon)`` points, land on the left.
    """

    lat: float
    lon: float
    t: float
    tide_level_m: float
    resolution: int
    bbox: tuple[float, float, float, float]
    land_fraction: float
    seed: int
    polylines: tuple[tuple[tuple[float, float], ...], ...]

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready body the demo origin sends."""
        return {
            "lat": self.lat,
            "lon": self.lon,
            "t": self.t,
            "tide_level_m": self.tide_level_m,
            "grid": {"rows": self.resolution, "cols": self.resolution},
            "bbox": list(self.bbox),
            "land_fraction": self.land_fraction,
            "seed": f"{self.seed:016x}",
            "polylines": self.polylines,
        }


def shoreline_json(shoreline: Shoreline) -> bytes:
    """Serialise a shoreline to compact JSON with sorted keys (deterministic bytes)."""
    text = json.dumps(shoreline.to_json(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


def _wrap_lon(lon: FloatGrid) -> FloatGrid:
    return (lon + 180.0) % 360.0 - 180.0


def extract_shoreline(
    lat: float, lon: float, t: float, *, resolution: int | None = None
) -> Shoreline:
    """Compute the shoreline around ``(lat, lon)`` at Unix time ``t``.

    Deterministic: the same arguments give an equal result (and byte-identical
    `shoreline_json`) in every process on the same machine and numpy build.

    Runtime complexity: O(resolution^2); 50–300 ms of CPU with the automatic resolution.

    Args:
        lat: latitude in degrees, in [-90, 90].
        lon: longitude in degrees, in [-180, 180].
        t: Unix time in seconds, finite.
        resolution: grid points per side, in [`MIN_RESOLUTION`, `MAX_RESOLUTION`];
            by default derived from the location (`auto_resolution`).

    Returns:
        The shoreline with its metadata.

    Raises:
        InvalidRequest: a coordinate is out of range or not finite, or the resolution is
            out of range.
    """
    # Floats from here on: an int t must serialise like the same t parsed from a URL.
    lat, lon, t = float(lat), float(lon), float(t)
    validate_location(lat, lon, t)
    seed = location_seed(lat, lon)
    n = auto_resolution(seed) if resolution is None else resolution
    if not MIN_RESOLUTION <= n <= MAX_RESOLUTION:
        raise InvalidRequest(
            f"resolution must be in [{MIN_RESOLUTION}, {MAX_RESOLUTION}]", param="resolution"
        )
    scale = 10**LOCATION_DECIMALS
    centre_lat = round(lat * scale) / scale
    centre_lon = round(lon * scale) / scale
    # Keep the window inside [-90, 90]: near a pole it slides away from the pole.
    centre_lat = min(max(centre_lat, -90.0 + WINDOW_HALF_DEG), 90.0 - WINDOW_HALF_DEG)
    half_lon = WINDOW_HALF_DEG / math.cos(math.radians(centre_lat))
    south, west = centre_lat - WINDOW_HALF_DEG, centre_lon - half_lon
    dlat = 2.0 * WINDOW_HALF_DEG / (n - 1)
    dlon = 2.0 * half_lon / (n - 1)

    z = synthetic_terrain(seed, n)
    phases = _Uniform(seed ^ _U64).draw(2, 0.0, 2.0 * math.pi)
    level = tide_level(
        t,
        (
            TidalConstituent(M2.name, M2.period_h, M2.amplitude_m, float(phases[0])),
            TidalConstituent(S2.name, S2.period_h, S2.amplitude_m, float(phases[1])),
        ),
    )
    land_fraction = int(np.count_nonzero(z > level)) / z.size
    polylines = []
    for line in contour(z, level):
        lats = np.round(south + line[:, 0] * dlat, _OUTPUT_DECIMALS)
        lons = np.round(_wrap_lon(west + line[:, 1] * dlon), _OUTPUT_DECIMALS)
        polylines.append(tuple(zip(lats.tolist(), lons.tolist(), strict=True)))
    east = float(_wrap_lon(np.array([west + 2.0 * half_lon]))[0])
    return Shoreline(
        lat=lat,
        lon=lon,
        t=t,
        tide_level_m=round(level, 6),
        resolution=n,
        bbox=(
            round(south, _OUTPUT_DECIMALS),
            round(float(_wrap_lon(np.array([west]))[0]), _OUTPUT_DECIMALS),
            round(south + 2.0 * WINDOW_HALF_DEG, _OUTPUT_DECIMALS),
            round(east, _OUTPUT_DECIMALS),
        ),
        land_fraction=land_fraction,
        seed=seed,
        polylines=tuple(polylines),
    )
