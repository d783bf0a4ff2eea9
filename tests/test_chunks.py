"""rows/chunks.py, the packed rows on disk: a saved folder written before the rows had a module of their own
(tests/data/saved-adult-v1, written by `_adult()`'s recipe with the code of main at bc16bc2) still loads, and saving
the same Tabular now writes the same files, byte for byte; the `.npy` files are NumPy's format, read back as written,
and a damaged one is refused, naming it, by the check made for that damage (the header's, with or without sha256)."""
import hashlib
import json
import sys
from pathlib import Path
import numpy as np
import pytest
import torch
from fastai.tabular.all import Categorify, CategoryBlock, FillMissing, Normalize
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.datasets import load_adult
from fastai_gpu_tabular.rows.chunks import (
    PAGE,
    PackedChunks,
    SavedFormatError,
    file_entry,
    is_part_name,
    load_rows,
    npy_header,
    part_name,
    write_blocks,
    write_npy,
)
from fastai_gpu_tabular.rows.pack import Layout

SAVED = Path(__file__).parent/'data'/'saved-adult-v1'

def _adult() -> TabularGPU:
    "The Tabular the saved folder holds: 400 sampled Adult rows (labels in no range: index.npy), fastai's procs."
    df = load_adult().sample(400, random_state=0)
    return TabularGPU(df, procs=[Categorify, FillMissing, Normalize],
                      cat_names=['workclass', 'education', 'marital-status', 'occupation', 'gender', 'native-country'],
                      cont_names=['age', 'fnlwgt', 'educational-num', 'hours-per-week'], y_names='income',
                      y_block=CategoryBlock(), splits=(list(range(300)), list(range(300, 400))), backend='pandas')

class _Count:
    n = 0
    def update(self, k): self.n += k

def _files(d:Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob('*')) if p.is_file()}

def test_an_earlier_save_loads_to_the_same_rows():
    to, old = _adult(), TabularGPU.load(SAVED, progress=False)   # every file's size and sha256 checked
    assert torch.equal(old.packed_rows('cpu')[0], to.packed_rows('cpu')[0]) and old.split == to.split == 300
    assert list(old.row_index) == list(to.row_index)
    assert old.procs.categorify.classes.keys() == to.procs.categorify.classes.keys()
    assert all(list(old.classes[n]) == list(to.classes[n]) for n in to.cat_names)

def test_a_save_writes_the_bytes_an_earlier_save_wrote(tmp_path):
    "Rows files, padded headers, chunks.json, index.npy and the manifest: the same bytes."
    _adult().save(tmp_path/'new', chunk_rows=128, progress=False)
    old, new = _files(SAVED), _files(tmp_path/'new')
    assert old.keys() == new.keys()
    for f in old:
        if f != 'tabular.json': assert new[f] == old[f], f
    a = json.loads(old['tabular.json'])
    assert json.dumps(a).encode() == old['tabular.json']   # so its bytes can be compared with another library's
    a['library'] = json.loads(new['tabular.json'])['library']
    assert json.dumps(a).encode() == new['tabular.json']   # the manifest's bytes, the library's versions aside
    assert [f for f,_ in a['splits']['train']] == [part_name(i) for i in range(3)]

def test_npy_files_are_numpys(tmp_path):
    rows = torch.randint(-2**31, 2**31 - 1, (1000, 5), dtype=torch.int32).numpy()
    np.save(tmp_path/'np.npy', rows)
    assert write_npy(tmp_path/'a.npy', rows) == file_entry(tmp_path/'a.npy')
    assert (tmp_path/'a.npy').read_bytes() == (tmp_path/'np.npy').read_bytes()   # unpadded: np.save's bytes
    for at in (0, 4, 1000, 5 * PAGE + 12):
        entry = write_npy(tmp_path/'p.npy', rows, at)
        head = len(npy_header(rows, at))
        assert head % PAGE == at % PAGE and entry['bytes'] == head + rows.nbytes
        assert entry['sha256'] == hashlib.sha256((tmp_path/'p.npy').read_bytes()).hexdigest()
        np.testing.assert_array_equal(np.load(tmp_path/'p.npy'), rows)   # padded as NumPy pads: its reader agrees

def test_blocks_written_and_read_back(tmp_path):
    "`write_blocks` then `PackedChunks` and `load_rows`: the rows as written, names as `part_name` gives them."
    rows = torch.arange(7000 * 3, dtype=torch.int32).view(7000, 3)
    layout,width = Layout.plan(2, 1)
    blocks = (rows[a:a + 1500].numpy() for a in range(0, 7000, 1500))
    res, entries = write_blocks(tmp_path/'t', blocks, layout, width, pb=(pb := _Count()))   # mapped by a load
    assert [n for n,_ in res] == [part_name(i) for i in range(5)] and all(map(is_part_name, [n for n,_ in res]))
    assert [n for _,n in res] == [1500] * 4 + [1000] and pb.n == 7000
    assert entries == {f: file_entry(tmp_path/'t'/f) for f in [n for n,_ in res] + ['chunks.json']}
    c = PackedChunks(tmp_path/'t')
    assert c.layout == layout and c.width == width and len(c) == 7000 and c.nbytes == rows.nbytes
    assert torch.equal(c.load(), rows) and torch.equal(c.take([0, 1499, 1500, 6999]), rows[[0, 1499, 1500, 6999]])
    assert torch.equal(c.read(2, 10, 20), rows[3010:3020])
    assert torch.equal(torch.from_numpy(np.concatenate(list(c.blocks(999)))), rows)
    assert max(len(b) for b in c.blocks(999)) == 999
    loaded = load_rows(tmp_path/'t', res, entries, width, True, _Count())
    assert torch.equal(loaded, rows)
    if sys.platform == 'linux':   # the files' whole pages are mapped, not read: they show in the process's maps
        maps = Path('/proc/self/maps').read_text()
        assert all(str((tmp_path/'t'/n).resolve()) in maps for n,_ in res)

def test_write_rows_is_np_save(tmp_path):
    rows = torch.arange(30, dtype=torch.int32).view(10, 3)
    assert PackedChunks.write_rows(tmp_path, 'a.npy', rows) == 10
    assert PackedChunks.write_rows(tmp_path, 'b.npy', rows[:0]) == 0   # no rows, no file
    np.save(tmp_path/'np.npy', rows.numpy())
    assert (tmp_path/'a.npy').read_bytes() == (tmp_path/'np.npy').read_bytes() and not (tmp_path/'b.npy').exists()
    c = PackedChunks.write(tmp_path, [('a.npy', 10), ('b.npy', 0)], *Layout.plan(2, 1))
    assert c.files == ['a.npy'] and torch.equal(c.load(), rows)

# each damage, and the message of the check that must catch it first: the header's dtype, order, shape and size checks
# (with the manifest's size made to agree, so that `check_size` passes), and for a flipped bit, the sha256
SIZE = r"is {got:,} bytes, not the {want:,} its header says: truncated or altered"
DAMAGE = {'truncated': SIZE, 'extended': SIZE,
          'dtype': r"holds int64 \(1500, 2\) values, not the int32 \(1500, 2\) saved",
          'fortran': r"holds int32 \(1500, 2\) values in Fortran order, not the int32 \(1500, 2\) saved",
          'shape': r"holds int32 \(1499, 2\) values, not the int32 \(1500, 2\) saved",
          'flip': r"does not match the sha256 it was saved with"}

@pytest.mark.parametrize('verify', [True, False], ids=['sha256', 'fast'])
@pytest.mark.parametrize('damage', list(DAMAGE))
def test_a_damaged_rows_file_is_named(tmp_path, damage, verify):
    """Each damage to a rows file is refused, naming the file, by the check made for it: with `verify=False` (the
    documented fast load, no sha256) the header's checks are all that stand between a damaged file and wrong rows;
    with it, they still come first. A flipped bit in the rows only the sha256 sees."""
    if damage == 'flip' and not verify: pytest.skip('verify=False reads the bytes as they are: a flipped bit loads')
    rows = torch.arange(4000 * 2, dtype=torch.int32).view(4000, 2)
    res, entries = write_blocks(tmp_path/'t', [rows[:2500].numpy(), rows[2500:].numpy()], *Layout.plan(1, 1))
    f = tmp_path/'t'/part_name(1)
    b = bytearray(f.read_bytes())
    if damage == 'truncated': b = b[:-4]
    elif damage == 'extended': b += bytes(4)
    elif damage == 'flip': b[-1] ^= 1
    else:   # the header, its length kept (its padding takes up the difference)
        old, new = {'dtype': (b"'<i4'", b"'<i8'"), 'fortran': (b"False", b"True "),
                    'shape': (b"(1500, 2)", b"(1499, 2)")}[damage]
        assert old in b
        b = b.replace(old, new)
    f.write_bytes(b)
    if damage != 'flip': entries[part_name(1)]['bytes'] = len(b)   # the manifest's size agrees: the header must see it
    msg = DAMAGE[damage].format(got=len(b), want=len(npy_header(rows[2500:].numpy(), 2500 * 2 * 4)) + 1500 * 2 * 4)
    with pytest.raises(SavedFormatError, match=part_name(1).replace('.', r'\.') + ' ' + msg):
        load_rows(tmp_path/'t', res, entries, 2, verify, _Count())
