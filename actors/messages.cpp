#include "actors/messages.hpp"
