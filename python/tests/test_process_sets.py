"""Process sets under the launcher (2 and 3 processes): collectives among a subset of the ranks,
with engines of their own, next to the job's."""

import pytest
import torch

import horovod_rs.torch as hvd

hvd.init()
N, R = hvd.size(), hvd.rank()
EVENS, ODDS = list(range(0, N, 2)), list(range(1, N, 2))


@pytest.fixture(scope="module")
def sets():
    return hvd.add_process_set(EVENS), hvd.add_process_set(hvd.ProcessSet(ODDS))


def mine(sets):
    return sets[0] if R % 2 == 0 else sets[1]


def test_collectives_run_among_the_sets_ranks(sets):
    ps = mine(sets)
    assert ps.included() and ps.size() == len(ps.ranks) and ps.ranks[ps.rank()] == R
    total = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, name="ps.sum", process_set=ps)
    assert total.item() == sum(ps.ranks)
    average = hvd.allreduce(torch.tensor([float(R)]), name="ps.avg", process_set=ps)
    assert average.item() == pytest.approx(sum(ps.ranks) / len(ps.ranks))
    gathered = hvd.allgather(torch.tensor([R]), name="ps.gather", process_set=ps)
    assert gathered.tolist() == ps.ranks
    root = ps.ranks[-1]  # a rank of the job, as in Horovod
    assert hvd.broadcast(torch.tensor([R]), root_rank=root, name="ps.bcast", process_set=ps).item() == root
    assert hvd.broadcast_object({"from": R}, root_rank=root, process_set=ps) == {"from": root}
    assert hvd.global_process_set.size() == N and hvd.global_process_set.ranks == list(range(N))


def test_unnamed_collectives_in_a_set_leave_the_jobs_names_alone(sets):
    if R % 2 == 0:  # only the even ranks make these two unnamed calls
        hvd.allreduce(torch.ones(2), process_set=sets[0])
        hvd.barrier(process_set=sets[0])
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_a_rank_outside_the_set_is_refused_by_name(sets):
    other = sets[1] if R % 2 == 0 else sets[0]
    if not other.ranks:
        pytest.skip("the other set is empty")
    with pytest.raises(ValueError, match="rank %d is not in ProcessSet" % R):
        hvd.allreduce(torch.ones(1), process_set=other)
    with pytest.raises(ValueError, match="exists already"):
        hvd.add_process_set(EVENS)


def test_distributed_optimizer_averages_within_the_set(sets):
    ps = mine(sets)
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters(),
                                   process_set=ps)
    x, y = torch.full((8, 4), float(R)), torch.ones(8, 1)
    torch.nn.functional.mse_loss(net(x), y).backward()
    opt.step()
    weights = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    every = hvd.allgather(weights.unsqueeze(0), name="ps.weights", process_set=ps)
    assert all(torch.equal(every[0], w) for w in every)


def test_a_removed_set_is_refused(sets):  # the last test: it removes the module's sets
    ps = mine(sets)
    assert hvd.remove_process_set(sets[0]) and hvd.remove_process_set(sets[1])
    assert not hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match="has not been added"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    again = hvd.add_process_set(EVENS)  # the same ranks may form a set again
    if R % 2 == 0:
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=again).item() == len(EVENS)
    hvd.remove_process_set(again)


def test_init_adds_all_of_its_process_sets_or_none():
    first = hvd.ProcessSet([0])
    with pytest.raises(ValueError, match="exists already"):  # the second is the job itself
        hvd.init(process_sets=[first, hvd.ProcessSet(range(N))])
    assert first.process_set_id is None
    with pytest.raises(ValueError, match="twice"):
        hvd.init(process_sets=[[0], [0]])
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: list(range(N))}
    # Refused, init can be called again with other sets (Horovod's test_process_sets_static).
    firsts = hvd.ProcessSet([0])
    hvd.init(process_sets=[firsts])
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: list(range(N)), firsts.process_set_id: [0]}
    if R == 0:
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=firsts).item() == 1
    hvd.remove_process_set(firsts)
