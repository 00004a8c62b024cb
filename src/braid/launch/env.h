// Placeholder until launch/ lands: the environment conventions a rank reads.
#pragma once
