// Note [The ranks build the same units]
// Under zero_stage 3, ShardAsBuilt broadcasts each unit's weights as the model's constructor
// hands the unit over (Note [Units sharded as built]), so the ranks' constructors run
// collectives in step. A rank whose constructor adds another unit (a model that depends on the
// rank), one more or one fewer, or builds without the sink, would meet the others' broadcasts
// with other sizes (Gloo aborts the process) or with another collective (a wait till the
// timeout). DDP's replica check comes too late: it runs after the model is built.
// So before a unit's broadcasts the ranks all-gather a record of where each is: "unit i built",
// with a hash of its name, its UnitBackward and its parameters' names, shapes, dtypes and
// trainability. Under zero_stage 3 the Trainer's first collective is the same record for the
// model built: "the model built with n units", with a hash of every unit (whether it was
// sharded as built included). The records have one size, so any two of these collectives
// meet: records that differ stop every rank at once, each naming where every rank was.
// A UnitBackward that differs between the ranks is caught here too (DDP's check compares
// parameters, not units): one rank would gather a unit again for its backward, another not.
#pragma once

#include <cstddef>

#include "ddp/units.h"
#include "dist/dist_context.h"

namespace ddptrain {

/// Before unit `unit`'s collectives in ShardAsBuilt: the ranks all built the same unit (Note
/// [The ranks build the same units]); an Error naming each rank's place otherwise. A collective.
void check_ranks_built_the_same_unit(const Units& units, size_t unit, const DistContext& ctx);

/// The Trainer's first collective under zero_stage 3: every rank built its whole model with the
/// same units (`units` may be null: none). A collective.
void check_ranks_built_the_same_units(const Units* units, const DistContext& ctx);

}  // namespace ddptrain
